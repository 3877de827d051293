// A peer for distlock's mixed-fleet tests: Apache Curator's own recipes,
// driven over stdin/stdout, one command per line and one answer line each.
//
//   java -cp <curator jars>:<dir> CuratorPeer <connect string> <session timeout ms>
//
// Commands (paths are absolute ZooKeeper paths):
//   mutex <path>            InterProcessMutex.acquire      -> held <czxid> <node>
//   read <path>             InterProcessReadWriteLock read  -> held <czxid> <node>
//   write <path>            InterProcessReadWriteLock write -> held <czxid> <node>
//   permit <path> <limit>   InterProcessSemaphoreV2, 1 lease -> held <czxid> <node>
//   latch <path> <id>       LeaderLatch, until leader       -> leader <czxid> <node>
//   leader? <path>          the latch's current leader      -> leader-id <id> | none
//   holding?                what this peer believes it holds -> holding <czxid> | not-holding
//   release                 gives back what it holds         -> released
//   quit (or end of input)  closes the session and exits     -> bye
// A command that fails answers "error <message>" and the peer keeps going.

import java.io.BufferedReader;
import java.io.Closeable;
import java.io.InputStreamReader;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.List;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.locks.LockInternals;
import org.apache.curator.framework.recipes.locks.StandardLockInternalsDriver;
import org.apache.curator.retry.RetryForever;
import org.apache.curator.utils.ZKPaths;
import org.apache.zookeeper.data.Stat;

public final class CuratorPeer {
    /** The prefix of LeaderLatch's nodes. */
    private static final String LATCH_PREFIX = "latch-";

    private final CuratorFramework client;
    /** How to give back the current hold; null when nothing is held. */
    private Closeable hold;
    /** The czxid of the node of the current hold. */
    private long heldCzxid;

    private CuratorPeer(CuratorFramework client) {
        this.client = client;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.out.println("error usage: CuratorPeer <connect string> <session timeout ms>");
            System.exit(2);
        }
        int sessionTimeout = Integer.parseInt(args[1]);
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(args[0])
                .sessionTimeoutMs(sessionTimeout)
                .connectionTimeoutMs(sessionTimeout)
                .retryPolicy(new RetryForever(100))
                .build();
        client.start();
        CuratorPeer peer = new CuratorPeer(client);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        System.out.println("ready");
        String line;
        while ((line = in.readLine()) != null) {
            String[] words = line.trim().split(" ");
            if (words[0].equals("quit")) {
                break;
            }
            String answer;
            try {
                answer = peer.run(words);
            } catch (Exception e) {
                answer = "error " + e.toString().replace('\n', ' ');
            }
            System.out.println(answer);
        }
        peer.giveBack();
        client.close();
        System.out.println("bye");
    }

    /** Runs one command and returns its answer line. */
    private String run(String[] words) throws Exception {
        switch (words[0]) {
            case "mutex":
                return holdLock(new InterProcessMutex(client, arg(words, 1)));
            case "read":
                return holdLock(new InterProcessReadWriteLock(client, arg(words, 1)).readLock());
            case "write":
                return holdLock(new InterProcessReadWriteLock(client, arg(words, 1)).writeLock());
            case "permit":
                return holdPermit(arg(words, 1), Integer.parseInt(arg(words, 2)));
            case "latch":
                return lead(arg(words, 1), arg(words, 2));
            case "leader?":
                return leaderOf(arg(words, 1));
            case "holding?":
                return hold == null ? "not-holding" : "holding " + heldCzxid;
            case "release":
                giveBack();
                return "released";
            default:
                return "error unknown command " + words[0];
        }
    }

    private static String arg(String[] words, int i) {
        if (words.length <= i) {
            throw new IllegalArgumentException(words[0] + " needs " + i + " argument(s)");
        }
        return words[i];
    }

    private void mustHoldNothing() {
        if (hold != null) {
            throw new IllegalStateException("already holding; release first");
        }
    }

    /** Takes `lock` and reports the node its acquisition created. */
    private String holdLock(InterProcessMutex lock) throws Exception {
        mustHoldNothing();
        lock.acquire();
        // The recipe keeps the path of the node it holds with; it is
        // protected, so read it the way a subclass would.
        Method getLockPath = InterProcessMutex.class.getDeclaredMethod("getLockPath");
        getLockPath.setAccessible(true);
        String node = (String) getLockPath.invoke(lock);
        hold = () -> {
            try {
                lock.release();
            } catch (Exception e) {
                throw new java.io.IOException(e);
            }
        };
        return "held " + remember(node) + " " + ZKPaths.getNodeFromPath(node);
    }

    /** Takes one lease of the semaphore at `path` with `limit` leases. */
    private String holdPermit(String path, int limit) throws Exception {
        mustHoldNothing();
        InterProcessSemaphoreV2 semaphore = new InterProcessSemaphoreV2(client, path, limit);
        Lease lease = semaphore.acquire();
        String name = lease.getNodeName();
        String node = name.startsWith("/") ? name : ZKPaths.makePath(path, "leases", name);
        hold = lease;
        return "held " + remember(node) + " " + ZKPaths.getNodeFromPath(node);
    }

    /** Joins the latch at `path` as `id` and waits until it leads. */
    private String lead(String path, String id) throws Exception {
        mustHoldNothing();
        LeaderLatch latch = new LeaderLatch(client, path, id);
        latch.start();
        latch.await();
        String node = latch.getOurPath();
        hold = latch;
        return "leader " + remember(node) + " " + ZKPaths.getNodeFromPath(node);
    }

    /** The id the latch at `path` is led by, ordered as LeaderLatch orders. */
    private String leaderOf(String path) throws Exception {
        List<String> sorted = LockInternals.getSortedChildren(
                client, path, LATCH_PREFIX, StandardLockInternalsDriver::standardFixForSorting);
        for (String node : sorted) {
            try {
                byte[] id = client.getData().forPath(ZKPaths.makePath(path, node));
                return "leader-id " + new String(id, StandardCharsets.UTF_8);
            } catch (org.apache.zookeeper.KeeperException.NoNodeException gone) {
                // Left between the listing and the read: the next one leads.
            }
        }
        return "none";
    }

    /** Records and returns the czxid of `node`, the token of this hold. */
    private long remember(String node) throws Exception {
        Stat stat = client.checkExists().forPath(node);
        if (stat == null) {
            throw new IllegalStateException(node + " vanished right after it was taken");
        }
        heldCzxid = stat.getCzxid();
        return heldCzxid;
    }

    private void giveBack() throws Exception {
        if (hold != null) {
            Closeable held = hold;
            hold = null;
            held.close();
        }
    }
}
