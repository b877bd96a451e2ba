-- check: a delivery marked delivered without a provider receipt
-- severity: error
-- database: state
SELECT delivery_id, task_id, idempotency_key, status
FROM deliveries
WHERE status = 'delivered' AND (provider_receipt IS NULL OR provider_receipt = '');
