"""A peer for distlock's mixed-fleet tests: kazoo's Lock on a ZooKeeper path,
told to count Curator's `-lock-` nodes as contenders, driven over stdin and
stdout with one command per line and one answer line each (the protocol of
the Curator peer, for the commands kazoo has a recipe for).

    python3 kazoo_peer.py <connect string> <session timeout ms>

Commands (paths are absolute ZooKeeper paths):
    mutex <path>    Lock(path, extra_lock_patterns=["-lock-"]).acquire()
                                               -> held <czxid> <node>
    holding?        what this peer believes it holds -> holding <czxid> | not-holding
    release         gives back what it holds   -> released
    quit (or end of input)  closes the session -> bye
A command that fails answers "error <message>" and the peer keeps going.
"""

import logging
import sys

from kazoo.client import KazooClient

# Curator's InterProcessMutex marker: kazoo then waits behind Curator's
# and distlock's (layout=curator) nodes as well as its own `__lock__` ones.
CURATOR_LOCK_PATTERN = "-lock-"


class Peer:
    def __init__(self, client):
        self.client = client
        self.lock = None
        self.czxid = None

    def run(self, words):
        command = words[0]
        if command == "mutex" and len(words) == 2:
            return self.take(words[1])
        if command == "holding?":
            if self.lock is None:
                return "not-holding"
            return "holding %d" % self.czxid
        if command == "release":
            self.release()
            return "released"
        raise ValueError("unknown command %r" % " ".join(words))

    def take(self, path):
        if self.lock is not None:
            raise ValueError("already holding")
        lock = self.client.Lock(
            path, "kazoo-peer", extra_lock_patterns=[CURATOR_LOCK_PATTERN]
        )
        lock.acquire()
        stat = self.client.exists(path + "/" + lock.node)
        if stat is None:
            lock.release()
            raise RuntimeError("the lock node %s vanished" % lock.node)
        self.lock, self.czxid = lock, stat.czxid
        return "held %d %s" % (stat.czxid, lock.node)

    def release(self):
        if self.lock is not None:
            lock, self.lock, self.czxid = self.lock, None, None
            lock.release()


def main():
    if len(sys.argv) != 3:
        print("error usage: kazoo_peer.py <connect string> <session timeout ms>")
        sys.exit(2)
    logging.basicConfig(level=logging.CRITICAL)
    timeout = int(sys.argv[2]) / 1000.0
    client = KazooClient(hosts=sys.argv[1], timeout=timeout)
    client.start(timeout=max(timeout, 10.0))
    peer = Peer(client)
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        try:
            answer = peer.run(words)
        except Exception as error:  # answered, and the peer keeps going
            answer = "error " + repr(error).replace("\n", " ")
        print(answer, flush=True)
    peer.release()
    client.stop()
    client.close()
    print("bye", flush=True)


if __name__ == "__main__":
    main()
