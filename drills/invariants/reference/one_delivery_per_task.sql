-- check: more than one outbound delivery (idempotency key) for one task: a duplicate side effect waiting to happen
-- severity: error
-- database: state
SELECT task_id, count(*) AS deliveries, group_concat(idempotency_key) AS keys
FROM deliveries
GROUP BY task_id
HAVING count(*) > 1;
