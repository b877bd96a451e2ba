-- check: a task completed more than once (duplicate completion events)
-- severity: error
-- database: state
SELECT task_id, count(*) AS completions
FROM events
WHERE type = 'task.completed'
GROUP BY task_id
HAVING count(*) > 1;
