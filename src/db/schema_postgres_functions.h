#pragma once

// Migration 8 of PostgreSQL's schema (schema_postgres.cc says what it does): mostly the
// PL/pgSQL functions behind the operations that run as one statement on PostgreSQL, each doing
// what the SQLite path's C++ statements do (one round trip instead of one per statement, issue
// 12). Kept apart from the list of migrations for its size; included by schema_postgres.cc
// only. Never edit an applied migration: a change is a new one.

#include <string_view>

namespace fp::db {

inline constexpr std::string_view kPostgresMigration8 = R"sql(
CREATE FUNCTION fp_addr_step(k BYTEA, step INT) RETURNS BYTEA
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
  i INT := length(k) - 1;
  b INT;
BEGIN
  WHILE i >= 1 LOOP
    b := get_byte(k, i) + step;
    IF b BETWEEN 0 AND 255 THEN
      RETURN set_byte(k, i, b);
    END IF;
    k := set_byte(k, i, (b + 256) % 256);
    i := i - 1;
  END LOOP;
  RAISE EXCEPTION 'address key % has no neighbour in direction %', k, step;
END;
$$;

-- Address allocation (db/ip_allocation.cc), each function one statement doing what the SQLite
-- path does in several, with the same results. Free addresses are maximal spans per range
-- (ip_free_span); SNAT addresses keep a bitmask of their four 16384-port blocks
-- (snat_address). Every allocation function returns one row (outcome, got_range, got_ip,
-- got_first_port, got_last_port): outcome 'ok' with the range, address and ports taken, or
-- 'exhausted' (the pool has nothing free: "No external IP addresses available") or
-- 'unavailable' (the explicit address is not wholly free in the pool: "Requested external IP
-- address not available"), with the other columns NULL and nothing changed.

-- fp_addr_has_step: whether the address key `k` has a neighbour one above (step 1) or one
-- below (step -1), i.e. is not the highest (lowest) address of its version.
CREATE FUNCTION fp_addr_has_step(k BYTEA, step INT) RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE STRICT AS $$
  SELECT substring(k FROM 2) <>
         decode(repeat(CASE WHEN step < 0 THEN '00' ELSE 'ff' END, length(k) - 1), 'hex')
$$;

-- fp_take_from_span: removes address `ip` from the free span [lo, hi] of range `rng`, keeping
-- the remainders below and above it as spans. Returns nothing.
CREATE FUNCTION fp_take_from_span(rng TEXT, pool TEXT, lo BYTEA, hi BYTEA, ip BYTEA)
RETURNS VOID LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM ip_free_span s WHERE s.range_id = rng AND s.first_address = lo;
  IF lo < ip THEN
    INSERT INTO ip_free_span (range_id, pool_id, first_address, last_address)
      VALUES (rng, pool, lo, fp_addr_step(ip, -1));
  END IF;
  IF ip < hi THEN
    INSERT INTO ip_free_span (range_id, pool_id, first_address, last_address)
      VALUES (rng, pool, fp_addr_step(ip, 1), hi);
  END IF;
END;
$$;

-- fp_allocate_explicit: address `ip` of pool `pool`, if wholly free (in a span of the pool;
-- an address with any SNAT block in use is in no span), ports 0-65535. Outcomes 'ok',
-- 'unavailable'.
CREATE FUNCTION fp_allocate_explicit(pool TEXT, ip BYTEA, OUT outcome TEXT, OUT got_range TEXT,
                                     OUT got_ip BYTEA, OUT got_first_port BIGINT,
                                     OUT got_last_port BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
  span ip_free_span%ROWTYPE;
BEGIN
  SELECT * INTO span FROM ip_free_span s WHERE s.pool_id = pool AND s.first_address <= ip
    ORDER BY s.first_address DESC LIMIT 1;
  -- The span below may be of the other IP version (version 4 keys sort first) or end below ip.
  IF NOT FOUND OR get_byte(span.first_address, 0) <> get_byte(ip, 0) OR
     span.last_address < ip THEN
    outcome := 'unavailable';
    RETURN;
  END IF;
  PERFORM fp_take_from_span(span.range_id, pool, span.first_address, span.last_address, ip);
  outcome := 'ok';
  got_range := span.range_id;
  got_ip := ip;
  got_first_port := 0;
  got_last_port := 65535;
END;
$$;

-- fp_allocate_lowest: the lowest wholly free address of pool `pool` (the first address of its
-- lowest span), ports 0-65535. Outcomes 'ok', 'exhausted'.
CREATE FUNCTION fp_allocate_lowest(pool TEXT, OUT outcome TEXT, OUT got_range TEXT,
                                   OUT got_ip BYTEA, OUT got_first_port BIGINT,
                                   OUT got_last_port BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
  lowest BYTEA;
BEGIN
  SELECT s.first_address INTO lowest FROM ip_free_span s WHERE s.pool_id = pool
    ORDER BY s.first_address LIMIT 1;
  IF NOT FOUND THEN
    outcome := 'exhausted';
    RETURN;
  END IF;
  SELECT * INTO outcome, got_range, got_ip, got_first_port, got_last_port
    FROM fp_allocate_explicit(pool, lowest);
END;
$$;

-- fp_allocate_snat: the lowest free (address, 16384-port block) of pool `pool`: the lowest
-- free block of the lowest partly used SNAT address if that address is below the pool's
-- lowest wholly free address, else block 0 of that wholly free address (which becomes an SNAT
-- address). Outcomes 'ok', 'exhausted'.
CREATE FUNCTION fp_allocate_snat(pool TEXT, OUT outcome TEXT, OUT got_range TEXT,
                                 OUT got_ip BYTEA, OUT got_first_port BIGINT,
                                 OUT got_last_port BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
  part snat_address%ROWTYPE;
  lowest_free BYTEA;
  blk INT := 0;
BEGIN
  SELECT * INTO part FROM snat_address a WHERE a.pool_id = pool AND a.used_blocks != 15
    ORDER BY a.ip LIMIT 1;
  SELECT s.first_address INTO lowest_free FROM ip_free_span s WHERE s.pool_id = pool
    ORDER BY s.first_address LIMIT 1;
  -- The lowest (address, first port) wins: block 0 of a wholly free address beats any block
  -- of a higher partly used address.
  IF part.ip IS NOT NULL AND (lowest_free IS NULL OR part.ip < lowest_free) THEN
    WHILE (part.used_blocks >> blk) & 1 = 1 LOOP
      blk := blk + 1;
    END LOOP;
    UPDATE snat_address a SET used_blocks = part.used_blocks | (1::BIGINT << blk)
      WHERE a.ip = part.ip;
    outcome := 'ok';
    got_range := part.range_id;
    got_ip := part.ip;
    got_first_port := blk * 16384;
    got_last_port := (blk + 1) * 16384 - 1;
    RETURN;
  END IF;
  SELECT * INTO outcome, got_range, got_ip, got_first_port, got_last_port
    FROM fp_allocate_lowest(pool);
  IF outcome = 'ok' THEN
    INSERT INTO snat_address (ip, pool_id, range_id, used_blocks)
      VALUES (got_ip, pool, got_range, 1);
    got_last_port := 16383;
  END IF;
END;
$$;

-- fp_release_address: returns address `ip` of range `rng` in pool `pool` to the free space:
-- a whole address (ports 0-65535) goes back to the spans, merged with the spans ending just
-- below and starting just above it; an SNAT block clears its bit, and the address goes back
-- to the spans once no block is in use. Returns 'ok', or 'snat_unrecorded' (an SNAT block of
-- an address snat_address does not hold: nothing changed).
CREATE FUNCTION fp_release_address(pool TEXT, rng TEXT, ip BYTEA, first_port BIGINT,
                                   last_port BIGINT) RETURNS TEXT
LANGUAGE plpgsql AS $$
DECLARE
  used BIGINT;
  lo BYTEA := ip;
  hi BYTEA := ip;
  neighbour BYTEA;
BEGIN
  IF NOT (first_port = 0 AND last_port = 65535) THEN
    SELECT a.used_blocks INTO used FROM snat_address a WHERE a.ip = fp_release_address.ip;
    IF NOT FOUND THEN
      RETURN 'snat_unrecorded';
    END IF;
    used := used & ~(1::BIGINT << (first_port / 16384)::INT);
    IF used <> 0 THEN
      UPDATE snat_address a SET used_blocks = used WHERE a.ip = fp_release_address.ip;
      RETURN 'ok';
    END IF;
    DELETE FROM snat_address a WHERE a.ip = fp_release_address.ip;
  END IF;
  IF fp_addr_has_step(ip, -1) THEN
    DELETE FROM ip_free_span s WHERE s.range_id = rng AND s.last_address = fp_addr_step(ip, -1)
      RETURNING s.first_address INTO neighbour;
    IF FOUND THEN
      lo := neighbour;
    END IF;
  END IF;
  IF fp_addr_has_step(ip, 1) THEN
    DELETE FROM ip_free_span s WHERE s.range_id = rng AND s.first_address = fp_addr_step(ip, 1)
      RETURNING s.last_address INTO neighbour;
    IF FOUND THEN
      hi := neighbour;
    END IF;
  END IF;
  INSERT INTO ip_free_span (range_id, pool_id, first_address, last_address)
    VALUES (rng, pool, lo, hi);
  RETURN 'ok';
END;
$$;

-- fp_floating_ip_delete: deletes the live floating IP `fip` (time_deleted := `deleted_at`) and
-- releases its address, unless it is attached or mid-operation. Returns one row (outcome,
-- fip_name, fip_state, holder): 'ok'; 'not_found' (no live floating IP with that id);
-- 'attached' with its name, its state and the holder (the instance's name, else the parent id,
-- else '?'), nothing changed; or fp_release_address's 'snat_unrecorded'.
CREATE FUNCTION fp_floating_ip_delete(fip TEXT, deleted_at BIGINT, OUT outcome TEXT,
                                      OUT fip_name TEXT, OUT fip_state TEXT, OUT holder TEXT)
LANGUAGE plpgsql AS $$
DECLARE
  e external_ip%ROWTYPE;
BEGIN
  SELECT * INTO e FROM external_ip x WHERE x.id = fip AND x.kind = 'floating' AND
    x.time_deleted IS NULL;
  IF NOT FOUND THEN
    outcome := 'not_found';
    RETURN;
  END IF;
  IF e.parent_id IS NOT NULL OR e.state <> 'detached' THEN
    outcome := 'attached';
    fip_name := e.name;
    fip_state := e.state;
    holder := coalesce((SELECT i.name FROM instance i WHERE i.id = e.parent_id), e.parent_id,
                       '?');
    RETURN;
  END IF;
  UPDATE external_ip x SET time_deleted = deleted_at WHERE x.id = fip;
  outcome := fp_release_address(e.ip_pool_id, e.ip_pool_range_id, e.ip, e.first_port,
                                e.last_port);
END;
$$;

-- retry_queue: no rows; a write whose attempt failed on a conflict locks it before its next
-- attempt takes its snapshot, so that its retries queue instead of colliding again
-- (postgres/engine.cc).
CREATE TABLE retry_queue ();

DROP TRIGGER saga_rows_on_insert ON saga;
DROP TRIGGER saga_rows_on_delete ON saga;
DROP FUNCTION saga_rows_count();
DELETE FROM counter WHERE name = 'saga_rows';
)sql";

}  // namespace fp::db
