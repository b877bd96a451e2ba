-- check: budget transfers conserve the total (1,000,000 tokens)
-- severity: error
-- database: state
SELECT sum(balance) AS total FROM budget HAVING sum(balance) != 1000000;
