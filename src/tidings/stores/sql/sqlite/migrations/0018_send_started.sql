-- 0018: the lease token a claimed intent's send started under (Ledger.intent_mark_started),
-- written by the worker right before the request leaves. A lease that ends (its worker
-- gone, or run out) with no send started under it is released for another claim: only
-- a send that may have left is uncertain. NULL: no send started yet.
ALTER TABLE intents ADD COLUMN send_started_token INTEGER;
