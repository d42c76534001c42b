-- Intents: admission, the outbox relay, the worker's claims and outcomes, reads.
-- Every "now" is a parameter; no query reads the clock. Key lists are bound as arrays.

-- name: admit_stage_create
-- Admission stages a page with COPY (far cheaper to send than one array per column),
-- then inserts from the stage server-side. A temporary table lives as long as its
-- connection; its rows only as long as the transaction.
CREATE TEMP TABLE IF NOT EXISTS admit_stage (
    n            integer          NOT NULL,
    key          text             NOT NULL,
    channel      text             NOT NULL,
    recipient_id text             NOT NULL,
    address      text             NOT NULL,
    template     text             NOT NULL,
    data         text             NOT NULL,
    campaign     text,
    occurrence   text,
    due_at       double precision NOT NULL,
    expires_at   double precision,
    body         text             NOT NULL,
    lane         smallint         NOT NULL,
    group_key    text             NOT NULL
) ON COMMIT DELETE ROWS

-- name: admit_stage_clear
-- Empties the stage inside a transaction that admits twice (a group of publishes:
-- drafts due later, then drafts due now), so the second sees only its own rows.
DELETE FROM admit_stage

-- name: admit_stage_copy
COPY admit_stage (n, key, channel, recipient_id, address, template, data, campaign,
                  occurrence, due_at, expires_at, body, lane, group_key) FROM STDIN

-- name: intent_admit_staged
-- The staged page as selected intents (one "selected" event each). Intents go in page
-- (key) order, so two schedulers admitting overlapping pages wait for each other
-- instead of deadlocking; events need no order (one per key here).
-- ON CONFLICT DO NOTHING waits for a concurrent admitter of the same key and then
-- skips it, so RETURNING is exactly the set of keys this transaction inserted, and
-- only those get an event.
WITH fresh AS (
    INSERT INTO intents (
        created_at, updated_at, selected_at, publish_lease_until, state,
        key, channel, recipient_id, address, template, data, campaign, occurrence,
        due_at, expires_at, lane, group_key
    )
    SELECT %(now)s::float8, %(now)s::float8, %(now)s::float8, %(lease_until)s::float8,
           'selected', key, channel, recipient_id, address, template, data, campaign,
           occurrence, due_at, expires_at, lane, group_key
    FROM admit_stage ORDER BY n
    ON CONFLICT (key) DO NOTHING
    RETURNING key
), logged AS (
    INSERT INTO events (key, channel, type, at, state, attempt)
    SELECT s.key, s.channel, 'selected', %(now)s::float8, 'selected', 0
    FROM admit_stage s JOIN fresh USING (key)
)
SELECT key FROM fresh

-- name: intent_admit_staged_enqueued
-- As intent_admit_staged, for intents whose messages go into the embedded queue in the
-- same statement: born enqueued, one "enqueued" event and one message each.
WITH fresh AS (
    INSERT INTO intents (
        created_at, updated_at, selected_at, enqueued_at, state,
        key, channel, recipient_id, address, template, data, campaign, occurrence,
        due_at, expires_at, lane, group_key
    )
    SELECT %(now)s::float8, %(now)s::float8, %(now)s::float8, %(now)s::float8,
           'enqueued', key, channel, recipient_id, address, template, data, campaign,
           occurrence, due_at, expires_at, lane, group_key
    FROM admit_stage ORDER BY n
    ON CONFLICT (key) DO NOTHING
    RETURNING key
), admitted AS (
    SELECT s.* FROM admit_stage s JOIN fresh USING (key)
), logged AS (
    INSERT INTO events (key, channel, type, at, state, attempt)
    SELECT key, channel, 'enqueued', %(now)s::float8, 'enqueued', 0
    FROM admitted
), queued AS (
    -- In stage order: message ids grow in publish order, which receive calls oldest.
    INSERT INTO messages (queue, enqueued_at, message_id, body, available_at, lane, group_key)
    SELECT channel, %(now)s::float8, key, body, greatest(due_at, %(now)s::float8), lane,
           group_key
    FROM admitted ORDER BY n
)
SELECT key FROM fresh

-- name: intent_admit_fresh
-- The common case of intent_admit_staged: a page none of whose keys exists yet (the
-- scheduler's next page past its high-water mark). Plain inserts without ON CONFLICT
-- skip the speculative insertion and the join back to the stage; a key that does exist
-- fails the statement with unique_violation, and the caller rolls back to its
-- savepoint and takes the ON CONFLICT statement instead.
-- No ORDER BY n: a sequential scan of the stage, emptied at every commit and filled by
-- one COPY, returns the rows in COPY order (page order) without a sort. So two
-- schedulers admitting the same page still meet on its first key rather than deadlock,
-- and message ids still grow in page order; if a scan ever returned another order,
-- a deadlock is retried and message order within a page is not a promise.
WITH fresh AS (
    INSERT INTO intents (
        created_at, updated_at, selected_at, publish_lease_until, state,
        key, channel, recipient_id, address, template, data, campaign, occurrence,
        due_at, expires_at, lane, group_key
    )
    SELECT %(now)s::float8, %(now)s::float8, %(now)s::float8, %(lease_until)s::float8,
           'selected', key, channel, recipient_id, address, template, data, campaign,
           occurrence, due_at, expires_at, lane, group_key
    FROM admit_stage
)
INSERT INTO events (key, channel, type, at, state, attempt)
SELECT key, channel, 'selected', %(now)s::float8, 'selected', 0 FROM admit_stage

-- name: intent_admit_fresh_enqueued
-- intent_admit_fresh for intents born enqueued, with their queue messages.
WITH fresh AS (
    INSERT INTO intents (
        created_at, updated_at, selected_at, enqueued_at, state,
        key, channel, recipient_id, address, template, data, campaign, occurrence,
        due_at, expires_at, lane, group_key
    )
    SELECT %(now)s::float8, %(now)s::float8, %(now)s::float8, %(now)s::float8,
           'enqueued', key, channel, recipient_id, address, template, data, campaign,
           occurrence, due_at, expires_at, lane, group_key
    FROM admit_stage
), logged AS (
    INSERT INTO events (key, channel, type, at, state, attempt)
    SELECT key, channel, 'enqueued', %(now)s::float8, 'enqueued', 0 FROM admit_stage
)
INSERT INTO messages (queue, enqueued_at, message_id, body, available_at, lane, group_key)
SELECT channel, %(now)s::float8, key, body, greatest(due_at, %(now)s::float8), lane,
       group_key
FROM admit_stage

-- name: admit_page_stage_create
-- A campaign page in columns (see model.DraftPage): per intent only its channel (an
-- index into the statement's channel arrays), recipient id, address and data; the key
-- and everything the page shares are put together server-side.
CREATE TEMP TABLE IF NOT EXISTS admit_page_stage (
    channel      integer NOT NULL,
    recipient_id text    NOT NULL,
    address      text    NOT NULL,
    data         text    NOT NULL
) ON COMMIT DELETE ROWS

-- name: admit_page_stage_copy
COPY admit_page_stage (channel, recipient_id, address, data) FROM STDIN

-- name: intent_admit_page
-- intent_admit_fresh for a staged page (the same no-sort, no-ON-CONFLICT reasoning:
-- a unique_violation sends the caller to intent_admit_staged). The channel arrays are
-- joined by index; the stage stays the outer, scanned side, so rows keep page order.
WITH staged AS (
    SELECT c.channel, c.prefix || s.recipient_id || c.suffix AS key, s.recipient_id,
           s.address, s.data, c.lane, c.group_key
    FROM admit_page_stage s
    JOIN unnest(%(channels)s::text[], %(prefixes)s::text[], %(suffixes)s::text[],
                %(lanes)s::smallint[], %(groups)s::text[])
         WITH ORDINALITY AS c(channel, prefix, suffix, lane, group_key, i)
         ON c.i = s.channel + 1
), fresh AS (
    INSERT INTO intents (
        created_at, updated_at, selected_at, publish_lease_until, state,
        key, channel, recipient_id, address, template, data, campaign, occurrence,
        due_at, expires_at, lane, group_key
    )
    SELECT %(now)s::float8, %(now)s::float8, %(now)s::float8, %(lease_until)s::float8,
           'selected', key, channel, recipient_id, address, %(template)s, data,
           %(campaign)s, %(occurrence)s, %(due_at)s::float8, %(expires_at)s::float8, lane,
           group_key
    FROM staged
)
INSERT INTO events (key, channel, type, at, state, attempt)
SELECT key, channel, 'selected', %(now)s::float8, 'selected', 0 FROM staged

-- name: intent_admit_page_enqueued
-- intent_admit_page for intents born enqueued, with their queue messages. The body is
-- model.message_body's: %(body_head)s, the key as a JSON string, %(body_tail)s.
WITH staged AS (
    SELECT c.channel, c.prefix || s.recipient_id || c.suffix AS key, s.recipient_id,
           s.address, s.data, c.lane, c.group_key
    FROM admit_page_stage s
    JOIN unnest(%(channels)s::text[], %(prefixes)s::text[], %(suffixes)s::text[],
                %(lanes)s::smallint[], %(groups)s::text[])
         WITH ORDINALITY AS c(channel, prefix, suffix, lane, group_key, i)
         ON c.i = s.channel + 1
), fresh AS (
    INSERT INTO intents (
        created_at, updated_at, selected_at, enqueued_at, state,
        key, channel, recipient_id, address, template, data, campaign, occurrence,
        due_at, expires_at, lane, group_key
    )
    SELECT %(now)s::float8, %(now)s::float8, %(now)s::float8, %(now)s::float8,
           'enqueued', key, channel, recipient_id, address, %(template)s, data,
           %(campaign)s, %(occurrence)s, %(due_at)s::float8, %(expires_at)s::float8, lane,
           group_key
    FROM staged
), logged AS (
    INSERT INTO events (key, channel, type, at, state, attempt)
    SELECT key, channel, 'enqueued', %(now)s::float8, 'enqueued', 0 FROM staged
)
INSERT INTO messages (queue, enqueued_at, message_id, body, available_at, lane, group_key)
SELECT channel, %(now)s::float8, key, %(body_head)s || to_json(key)::text || %(body_tail)s,
       greatest(%(due_at)s::float8, %(now)s::float8), lane, group_key
FROM staged

-- name: relay_lock
-- One relay's lease statement at a time (claim, extend, release), across machines: a
-- claim skips the keys of the leases written before it, so two must not interleave.
SELECT pg_advisory_xact_lock(1919705465, hashtext(current_schema()))

-- name: relay_plan
-- The outbox is mostly rows admitted moments ago, before autovacuum has analysed them:
-- with no statistics the planner took every selected row by bitmap and sorted them for
-- each page (0.4 s a page of 5,000 in an outbox of 200,000). Walking the state index in
-- its own order stops after a page.
SELECT set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true)

-- name: relay_probe_plan
-- The marking and the lease extension join a chunk's keys with intents. On a fresh
-- outbox (no statistics) the planner took the state filter for a handful of rows and
-- hashed every selected row of the state index for each statement: 36 us of server CPU
-- a row marked in an outbox of 200,000, growing with the outbox. Each key is one
-- primary-key probe instead (9 us a row, whatever the outbox).
SELECT set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true),
       set_config('enable_bitmapscan', 'off', true)

-- name: intent_claim_publish
-- A page of due selected intents, oldest due first (the order of intents_state: the
-- scan stops after a page), skipping the keys of live leases and those leased at
-- admission; the page's lease is one row (see migration 0013). Lapsed leases go first.
-- The store sorts the page it returns.
WITH lapsed AS (
    DELETE FROM publish_leases WHERE until <= %(now)s
), page AS (
    SELECT key, channel, due_at, state, lane, group_key FROM intents
    WHERE state = 'selected' AND due_at <= %(due_by)s
      AND (publish_lease_until IS NULL OR publish_lease_until <= %(now)s)
      AND key NOT IN (SELECT unnest(keys) FROM publish_leases WHERE until > %(now)s)
    ORDER BY due_at
    LIMIT %(limit)s
), leased AS (
    INSERT INTO publish_leases (until, keys)
    SELECT %(lease_until)s, array_agg(key) FROM page HAVING count(*) > 0
)
SELECT key, channel, due_at, state, lane, group_key AS "group" FROM page

-- name: intent_extend_publish
-- A relay still publishing a page moves the lease of its unpublished rest forward, but
-- only of the rows it still holds: still selected and in no other relay's lease (a row
-- whose lease lapsed and that another relay took since is not extended, and is left to
-- that relay). The caller's lease is the one until held_until holding these keys (two
-- live leases never share a key); it is replaced by one holding what is still held.
WITH given AS (
    SELECT DISTINCT key FROM unnest(%(keys)s::text[]) AS u(key)
), mine AS (
    -- INTERSECT (hashed or sorted), not a join the planner may nest: a lease and a page
    -- of 5,000 keys each made 25,000,000 comparisons.
    SELECT l.id FROM publish_leases l
    WHERE l.until = %(held_until)s
      AND EXISTS (SELECT unnest(l.keys) INTERSECT SELECT key FROM given)
), dropped AS (
    DELETE FROM publish_leases WHERE id IN (SELECT id FROM mine)
), held AS (
    SELECT intents.key FROM intents JOIN given USING (key)
    WHERE intents.state = 'selected'
      AND intents.key NOT IN (SELECT unnest(keys) FROM publish_leases
                              WHERE id NOT IN (SELECT id FROM mine))
), leased AS (
    INSERT INTO publish_leases (until, keys)
    SELECT %(lease_until)s, array_agg(key) FROM held HAVING count(*) > 0
)
SELECT key FROM held

-- name: intent_release_publish
-- The relay is done with these keys of its page (their chunks marked, or given up): they
-- leave its lease, and what it did not mark may be taken by the next pass. The rest of
-- the lease (a paused channel's intents of the page) stays until it lapses; an empty
-- lease is deleted. %(keys)s is a JSON array of the keys, as in intent_mark_enqueued.
WITH given AS (
    SELECT DISTINCT key FROM json_array_elements_text(%(keys)s::json) AS u(key)
), mine AS (
    -- Set operations (hashed or sorted), as in intent_extend_publish.
    SELECT l.id, ARRAY(SELECT unnest(l.keys) EXCEPT SELECT key FROM given) AS kept
    FROM publish_leases l
    WHERE l.until = %(held_until)s
      AND EXISTS (SELECT unnest(l.keys) INTERSECT SELECT key FROM given)
), emptied AS (
    DELETE FROM publish_leases WHERE id IN (SELECT id FROM mine WHERE cardinality(kept) = 0)
)
UPDATE publish_leases SET keys = mine.kept FROM mine
WHERE publish_leases.id = mine.id AND cardinality(mine.kept) > 0

-- name: intent_mark_enqueued
-- selected/retryable -> enqueued and one enqueued event per intent moved, in one
-- statement (so no other transaction can slip between the events and the update).
-- Joined on the unnested keys, so each is one primary-key probe (see
-- intent_extend_publish: key = ANY(...) could scan the state index's whole outbox),
-- in key order, the order every other writer locks intents in. %(keys)s is a JSON
-- array of the keys: psycopg adapts a list into text[] element by element in Python
-- (1.5 us a key), json.dumps in C (0.17 us).
WITH moved AS (
    UPDATE intents
    SET state = 'enqueued', enqueued_at = %(now)s, updated_at = %(now)s,
        publish_lease_until = NULL
    FROM (SELECT key FROM json_array_elements_text(%(keys)s::json) AS u(key)
          ORDER BY key) AS k
    WHERE intents.key = k.key AND intents.state IN ('selected', 'retryable')
    RETURNING intents.key, intents.channel, intents.attempts
)
INSERT INTO events (key, channel, type, at, state, attempt)
SELECT key, channel, 'enqueued', %(now)s, 'enqueued', attempts FROM moved ORDER BY key

-- name: intent_claim_read
-- The current rows of the keys a worker wants to claim, locked until the claim commits.
-- A row another transaction holds (a claimer, a sweep, an outcome commit) is skipped,
-- not waited for: it is in flux, so the worker reads it as busy and retries shortly.
SELECT key, channel, recipient_id, address, template, data, campaign, occurrence, state,
       due_at, expires_at, created_at, updated_at, selected_at, enqueued_at, accepted_at,
       finished_at, attempts, failures, lease_owner, lease_token, lease_expires_at,
       next_attempt_at, receipt, provider_request_id, disposition, reason, cancel_requested,
       lane, group_key
FROM intents
WHERE key = ANY(%(keys)s::text[])
ORDER BY key
FOR UPDATE SKIP LOCKED

-- name: intent_existing_keys
-- Which of the keys exist at all (no lock): tells a skipped, locked row from a missing one.
SELECT key FROM intents WHERE key = ANY(%(keys)s::text[])

-- name: intent_bodies
-- What the intents of the keys were asked for (core/repeats.IntentBody): a notify repeated
-- under its key is compared with them in the transaction that writes it, after its
-- insert (a row another transaction committed meanwhile is seen by this statement).
SELECT key, channel, recipient_id, address, template, data, due_at, expires_at, created_at
FROM intents WHERE key = ANY(%(keys)s::text[])

-- name: intent_lock_keys
-- Lock the rows a batch of changes touches in key order first, so two batches that
-- share keys wait for each other instead of deadlocking.
SELECT key FROM intents WHERE key = ANY(%(keys)s::text[]) ORDER BY key FOR UPDATE

-- name: intent_claim
-- Guarded by the state and token read (and locked) in the same transaction.
-- %(leases)s is a JSON array of [key, state, token] (see event_insert_columns for why JSON).
-- %(started)s marks the send started under the new lease at once (see
-- Ledger.intent_claim_many's ``started``).
UPDATE intents
SET state = 'claimed', lease_owner = %(owner)s, lease_token = intents.lease_token + 1,
    lease_expires_at = %(expires_at)s, attempts = intents.attempts + 1,
    updated_at = %(now)s, publish_lease_until = NULL,
    send_started_token = CASE WHEN %(started)s::bool THEN intents.lease_token + 1
                              ELSE intents.send_started_token END
FROM (SELECT r->>0 AS key, r->>1 AS state, (r->>2)::bigint AS token
      FROM jsonb_array_elements(%(leases)s::jsonb) AS j(r)) AS c
WHERE intents.key = c.key AND intents.state = c.state AND intents.lease_token = c.token

-- name: intent_renew_leases
UPDATE intents SET lease_expires_at = %(expires_at)s
FROM unnest(%(keys)s::text[], %(tokens)s::bigint[]) AS lease(key, token)
WHERE intents.key = lease.key
  AND intents.lease_token = lease.token
  AND intents.state = 'claimed'
  AND intents.lease_owner = %(owner)s
  AND intents.lease_expires_at > %(now)s
RETURNING intents.key

-- name: intent_mark_started
-- A worker's sends about to leave: each intent records the lease token its send
-- started under, guarded like a renewal (still claimed, still ours, lease not run
-- out), so a send is started only under a lease nobody else can have taken. The keys
-- marked are returned; a send whose key is missing must not start.
UPDATE intents SET send_started_token = intents.lease_token
FROM unnest(%(keys)s::text[], %(tokens)s::bigint[]) AS lease(key, token)
WHERE intents.key = lease.key
  AND intents.lease_token = lease.token
  AND intents.state = 'claimed'
  AND intents.lease_owner = %(owner)s
  AND intents.lease_expires_at > %(now)s
RETURNING intents.key

-- name: intent_apply
-- One guarded change; the flags (leaves_claimed, terminal, reopens) are computed from
-- tidings.states so the field effects of a target state live in one place.
UPDATE intents SET
    state               = %(to_state)s::text,
    updated_at          = %(now)s::float8,
    enqueued_at         = CASE WHEN %(to_state)s::text = 'enqueued' THEN %(now)s::float8
                               ELSE enqueued_at END,
    publish_lease_until = CASE WHEN %(to_state)s::text = 'enqueued' THEN NULL
                               ELSE publish_lease_until END,
    accepted_at         = CASE WHEN %(to_state)s::text = 'accepted' THEN %(now)s::float8
                               ELSE accepted_at END,
    receipt             = CASE WHEN %(to_state)s::text = 'accepted' THEN %(receipt)s::text
                               ELSE receipt END,
    next_attempt_at     = CASE WHEN %(to_state)s::text IN ('retryable', 'uncertain')
                               THEN %(next_attempt_at)s::float8 ELSE next_attempt_at END,
    lease_owner         = CASE WHEN %(leaves_claimed)s::bool THEN NULL ELSE lease_owner END,
    lease_expires_at    = CASE WHEN %(leaves_claimed)s::bool THEN NULL
                               ELSE lease_expires_at END,
    finished_at         = CASE WHEN %(terminal)s::bool THEN %(now)s::float8
                               WHEN %(reopens)s::bool THEN NULL ELSE finished_at END,
    disposition         = CASE WHEN %(terminal)s::bool THEN %(to_state)s::text
                               WHEN %(reopens)s::bool THEN NULL ELSE disposition END,
    reason              = CASE WHEN %(terminal)s::bool THEN %(reason)s::text ELSE reason END,
    attempts            = attempts + %(count_attempt)s::int,
    failures            = CASE WHEN %(reset_failures)s::bool THEN 0
                               ELSE failures + %(count_failure)s::int END,
    provider_request_id = coalesce(%(provider_request_id)s::text, provider_request_id)
WHERE key = %(key)s::text
  AND state = %(from_state)s::text
  AND (%(lease_token)s::bigint IS NULL OR lease_token = %(lease_token)s::bigint)
  AND (%(lease_expired_by)s::float8 IS NULL
       OR lease_expires_at <= %(lease_expired_by)s::float8)
  AND (NOT %(unstarted)s::bool OR send_started_token IS DISTINCT FROM lease_token)
RETURNING channel, attempts

-- name: intent_apply_columns
-- intent_apply for a batch of changes to distinct keys in one statement (a worker's
-- commit of outcomes): %(changes)s is a JSON array of the changes, each an array of its
-- fields in the order below (see event_insert_columns for why JSON); returns the
-- position of each change applied.
UPDATE intents AS i SET
    state               = c.to_state,
    updated_at          = %(now)s::float8,
    enqueued_at         = CASE WHEN c.to_state = 'enqueued' THEN %(now)s::float8
                               ELSE i.enqueued_at END,
    publish_lease_until = CASE WHEN c.to_state = 'enqueued' THEN NULL
                               ELSE i.publish_lease_until END,
    accepted_at         = CASE WHEN c.to_state = 'accepted' THEN %(now)s::float8
                               ELSE i.accepted_at END,
    receipt             = CASE WHEN c.to_state = 'accepted' THEN c.receipt ELSE i.receipt END,
    next_attempt_at     = CASE WHEN c.to_state = 'retryable' THEN c.next_attempt_at
                               ELSE i.next_attempt_at END,
    lease_owner         = CASE WHEN c.leaves_claimed THEN NULL ELSE i.lease_owner END,
    lease_expires_at    = CASE WHEN c.leaves_claimed THEN NULL ELSE i.lease_expires_at END,
    finished_at         = CASE WHEN c.terminal THEN %(now)s::float8
                               WHEN c.reopens THEN NULL ELSE i.finished_at END,
    disposition         = CASE WHEN c.terminal THEN c.to_state
                               WHEN c.reopens THEN NULL ELSE i.disposition END,
    reason              = CASE WHEN c.terminal THEN c.reason ELSE i.reason END,
    attempts            = i.attempts + c.count_attempt,
    failures            = CASE WHEN c.reset_failures THEN 0
                               ELSE i.failures + c.count_failure END,
    provider_request_id = coalesce(c.provider_request_id, i.provider_request_id)
FROM (SELECT r->>0 AS key, r->>1 AS from_state, r->>2 AS to_state,
             (r->>3)::bigint AS lease_token, (r->>4)::float8 AS lease_expired_by,
             r->>5 AS receipt, (r->>6)::float8 AS next_attempt_at,
             (r->>7)::bool AS leaves_claimed, (r->>8)::bool AS terminal,
             (r->>9)::bool AS reopens, r->>10 AS reason, (r->>11)::int AS count_attempt,
             (r->>12)::int AS count_failure, (r->>13)::bool AS reset_failures,
             r->>14 AS provider_request_id, (r->>15)::bool AS unstarted, ord
      FROM jsonb_array_elements(%(changes)s::jsonb) WITH ORDINALITY AS j(r, ord)) AS c
WHERE i.key = c.key
  AND i.state = c.from_state
  AND (c.lease_token IS NULL OR i.lease_token = c.lease_token)
  AND (c.lease_expired_by IS NULL OR i.lease_expires_at <= c.lease_expired_by)
  AND (NOT c.unstarted OR i.send_started_token IS DISTINCT FROM i.lease_token)
RETURNING c.ord, i.channel, i.attempts

-- name: intent_cancel_read
SELECT state, channel, attempts, cancel_requested FROM intents WHERE key = %s FOR UPDATE

-- name: intent_cancel_request
-- A claimed intent: the worker sees the request before its send.
UPDATE intents SET cancel_requested = true, updated_at = %s
WHERE key = %s AND state = 'claimed'

-- name: intent_get
SELECT key, channel, recipient_id, address, template, data, campaign, occurrence, state,
       due_at, expires_at, created_at, updated_at, selected_at, enqueued_at, accepted_at,
       finished_at, attempts, failures, lease_owner, lease_token, lease_expires_at,
       next_attempt_at, receipt, provider_request_id, disposition, reason, cancel_requested,
       lane, group_key
FROM intents
WHERE key = %s

-- name: intent_find
-- A NULL filter is off; %(lease_expired_at)s only narrows claimed rows. %(due_before)s is
-- a COALESCE, not an OR, so that it bounds the index scan of intents_state in a generic
-- plan too.
SELECT key, channel, recipient_id, address, template, data, campaign, occurrence, state,
       due_at, expires_at, created_at, updated_at, selected_at, enqueued_at, accepted_at,
       finished_at, attempts, failures, lease_owner, lease_token, lease_expires_at,
       next_attempt_at, receipt, provider_request_id, disposition, reason, cancel_requested,
       lane, group_key
FROM intents
WHERE state = ANY(%(states)s::text[])
  AND (%(channel)s::text IS NULL OR channel = %(channel)s::text)
  AND (%(updated_before)s::float8 IS NULL OR updated_at < %(updated_before)s::float8)
  AND (%(lease_expired_at)s::float8 IS NULL OR state <> 'claimed'
       OR lease_expires_at <= %(lease_expired_at)s::float8)
  AND (%(lease_owner)s::text IS NULL OR lease_owner = %(lease_owner)s::text)
  AND due_at <= coalesce(%(due_before)s::float8, 'infinity'::float8)
ORDER BY state, due_at, updated_at, key
LIMIT %(limit)s

-- name: intent_counts
SELECT channel, state, count(*)::int FROM intents GROUP BY channel, state

-- name: intent_latencies
SELECT accepted_at - due_at FROM intents
WHERE channel = %s AND accepted_at IS NOT NULL
ORDER BY accepted_at
