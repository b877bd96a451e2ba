-- check: an unfinished attempt for a task that is no longer running (a worker lost track of its work)
-- severity: warning
-- database: state
SELECT a.id, a.task_id, t.status
FROM task_attempts a JOIN tasks t ON t.task_id = a.task_id
WHERE a.finished_at IS NULL AND t.status NOT IN ('running', 'pending');
