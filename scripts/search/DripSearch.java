// A single-node OpenSearch server for development and tests, started by scripts/search.sh.
//
// The official bootstrap refuses to run as root (CI runs as root) and needs a distribution's
// modules/ tree; this main builds the node's settings itself and starts an
// org.opensearch.node.Node with the two plugins it needs on the class path: Netty4 (the
// HTTP layer) and CommonAnalysis (language analyzers). It binds 127.0.0.1 only, as one
// single-node cluster, and closes the node on SIGTERM (shutdown hook).
//
//   java -cp 'libs/*:classes' DripSearch HOME HTTP_PORT TRANSPORT_PORT
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;

import org.opensearch.analysis.common.CommonAnalysisPlugin;
import org.opensearch.common.settings.Settings;
import org.opensearch.env.Environment;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.transport.Netty4Plugin;

public final class DripSearch {
    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: DripSearch HOME HTTP_PORT TRANSPORT_PORT");
            System.exit(2);
        }
        Path home = Paths.get(args[0]).toAbsolutePath();
        Settings settings = Settings.builder()
            .put("path.home", home.toString())
            .put("path.data", home.resolve("data").toString())
            .put("path.logs", home.resolve("logs").toString())
            .put("cluster.name", "dripstream-local")
            .put("node.name", "dripstream-search")
            .put("network.host", "127.0.0.1")
            .put("http.port", args[1])
            .put("transport.port", args[2])
            .put("discovery.type", "single-node")
            .put("cluster.routing.allocation.disk.threshold_enabled", false)
            .put("action.auto_create_index", false)
            .build();
        Environment environment = InternalSettingsPreparer.prepareEnvironment(
            settings, Collections.emptyMap(), null, () -> "dripstream-search");
        Node node = new Node(
            environment, List.of(Netty4Plugin.class, CommonAnalysisPlugin.class), true) {};
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                node.close();
            } catch (Exception error) {
                error.printStackTrace();
            } finally {
                stopped.countDown();
            }
        }, "dripsearch-shutdown"));
        node.start();
        System.err.println("dripsearch: started on 127.0.0.1:" + args[1]);
        stopped.await();
    }
}
