-- check: a task is both completed and still pending/running (a completion event for an unfinished task, or a completed task without a completion time)
-- severity: error
-- database: state
SELECT t.task_id, t.status, t.completed_at
FROM tasks t
WHERE (t.status IN ('pending', 'running') AND EXISTS (SELECT 1 FROM events e WHERE e.task_id = t.task_id AND e.type = 'task.completed'))
   OR (t.status = 'completed' AND t.completed_at IS NULL);
