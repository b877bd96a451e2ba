-- check: a completed task whose outbound delivery never got a receipt (a lost side effect)
-- severity: error
-- database: state
SELECT t.task_id
FROM tasks t
WHERE t.status = 'completed'
  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.task_id = t.task_id AND d.status = 'delivered' AND d.provider_receipt IS NOT NULL);
