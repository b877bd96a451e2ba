-- check: a running task without an owning worker or a lease
-- severity: error
-- database: state
SELECT task_id, worker_id, lease_until
FROM tasks
WHERE status = 'running' AND (worker_id IS NULL OR lease_until IS NULL);
