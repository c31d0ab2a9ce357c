"""The redis-py adaptation: connections and pub/sub routing, redis-py's errors into
redlease's, URLs (Sentinel), what a client learns of each server, script calls packed
into RESP bytes."""
