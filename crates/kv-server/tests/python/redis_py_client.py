"""redis-py against the server, with the client's defaults (RESP3 through HELLO 3 in
redis-py 8) and with protocol=2: the commands, pipelines, and transactions, which must fail
without applying anything. Run by tests/python_client.rs as `python3 THIS_FILE PORT`;
prints the redis-py version and exits non-zero at the first failed check."""

import sys

import redis


def check(condition, what):
    if not condition:
        raise SystemExit(f"failed: {what}")


def commands(r, label):
    prefix = f"{label}:"
    r.set(prefix + "a", "1")
    check(r.get(prefix + "a") == b"1", "GET after SET")
    check(r.get(prefix + "missing") is None, "GET of a missing key is None")
    check(r.set(prefix + "a", "2", nx=True) is None, "SET NX on an existing key")
    check(r.setnx(prefix + "n", "x") is True, "SETNX of a new key")
    check(r.append(prefix + "n", "yz") == 3, "APPEND")
    check(r.strlen(prefix + "n") == 3, "STRLEN")
    check(r.setrange(prefix + "n", 1, "Y") == 3, "SETRANGE")
    check(r.getrange(prefix + "n", 0, -1) == b"xYz", "GETRANGE")
    check(r.incrbyfloat(prefix + "f", 10.5) == 10.5, "INCRBYFLOAT")
    check(r.incrbyfloat(prefix + "f", 0.1) == 10.6, "INCRBYFLOAT in long double")
    check(r.get(prefix + "f") == b"10.6", "INCRBYFLOAT's stored text")
    check(r.incr(prefix + "i") == 1 and r.incrby(prefix + "i", 41) == 42, "INCR, INCRBY")
    check(r.mget([prefix + "a", prefix + "missing"]) == [b"1", None], "MGET")
    check(r.exists(prefix + "a", prefix + "a", prefix + "missing") == 2, "EXISTS")
    check(r.type(prefix + "a") in (b"string", "string"), "TYPE")
    check(sorted(r.keys(prefix + "[an]")) == [(prefix + "a").encode(), (prefix + "n").encode()], "KEYS glob")
    check(sorted(r.scan_iter(match=prefix + "?", count=2)) == sorted(r.keys(prefix + "?")), "SCAN MATCH")
    check(r.randomkey() is not None, "RANDOMKEY")
    check(r.unlink(prefix + "i") == 1 and r.touch(prefix + "a") == 1, "UNLINK, TOUCH")
    check(r.client_setname(label) and r.client_getname() in (label, label.encode()), "CLIENT SETNAME")
    check(r.client_id() > 0, "CLIENT ID")
    check(r.info()["redis_version"] == "7.0.15", "INFO redis_version")
    check(r.dbsize() >= 3, "DBSIZE")
    with r.pipeline(transaction=False) as pipe:
        pipe.set(prefix + "p", 1).incr(prefix + "p").get(prefix + "p")
        check(pipe.execute() == [True, 2, b"2"], "a plain pipeline")
    hashes(r, prefix)


def hashes(r, prefix):
    h = prefix + "h"
    check(r.hset(h, mapping={"name": "ann", "visits": 1}) == 2, "HSET of a mapping")
    check(r.hget(h, "name") == b"ann" and r.hget(h, "nope") is None, "HGET")
    check(r.hgetall(h) == {b"name": b"ann", b"visits": b"1"}, "HGETALL as a dict")
    check(r.hincrby(h, "visits", 2) == 3 and r.hincrbyfloat(h, "score", 1.5) == 1.5, "HINCRBY, HINCRBYFLOAT")
    check(r.hmget(h, ["name", "nope"]) == [b"ann", None], "HMGET")
    check(r.hlen(h) == 3 and r.hexists(h, "score") and r.hstrlen(h, "name") == 3, "HLEN, HEXISTS, HSTRLEN")
    check(sorted(r.hkeys(h)) == [b"name", b"score", b"visits"], "HKEYS")
    check(dict(r.hscan_iter(h, match="*s*", count=1)) == {b"visits": b"3", b"score": b"1.5"}, "HSCAN")
    check(r.type(h) in (b"hash", "hash"), "TYPE of a hash")
    try:
        r.get(h)
    except redis.ResponseError as error:
        check(str(error).startswith("WRONGTYPE"), f"GET of a hash: {error}")
    else:
        raise SystemExit("failed: GET of a hash answered")
    check(r.hdel(h, "name", "score", "visits") == 3 and r.exists(h) == 0, "HDEL of every field")


def transactions(r, label):
    prefix = f"{label}:tx:"
    # The transactional pipeline (MULTI ... EXEC in one send): it must fail, nothing applied.
    pipe = r.pipeline()
    pipe.set(prefix + "a", "applied").incr(prefix + "n").append(prefix + "s", "x")
    try:
        pipe.execute()
    except redis.ResponseError as error:
        check("MULTI" in str(error), f"the transaction's error names MULTI: {error}")
    else:
        raise SystemExit("failed: a transactional pipeline ran")
    check(r.exists(prefix + "a", prefix + "n", prefix + "s") == 0, "nothing of the transaction applied")
    # WATCH, as the transaction() helper and optimistic-locking code use it.
    try:
        r.transaction(lambda p: p.multi() or p.set(prefix + "w", 1), prefix + "w")
    except redis.ResponseError as error:
        check("WATCH" in str(error), f"the WATCH error names WATCH: {error}")
    else:
        raise SystemExit("failed: a WATCH transaction ran")
    check(r.exists(prefix + "w") == 0, "nothing of the WATCH transaction applied")
    # The connection is usable afterwards.
    check(r.ping() is True, "PING after the refusals")


def main():
    port = int(sys.argv[1])
    print(f"redis-py {redis.__version__}")
    default = redis.Redis(port=port)
    default.flushdb()
    hello = default.connection_pool.get_connection()
    check(hello.protocol == 3 if int(redis.__version__.split(".")[0]) >= 8 else True,
          f"redis-py {redis.__version__} speaks RESP3 by default")
    default.connection_pool.release(hello)
    for label, client in [("default", default), ("resp2", redis.Redis(port=port, protocol=2)),
                          ("resp3", redis.Redis(port=port, protocol=3))]:
        commands(client, label)
        transactions(client, label)
        resp = client.client_info().get("resp")
        check(str(resp) == str(client.connection_pool.connection_kwargs.get("protocol") or 3),
              f"{label}: CLIENT INFO says resp={resp}")
    print("ok")


if __name__ == "__main__":
    main()
