package dynamickafka.bench;

import java.util.Collection;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import org.apache.flink.connector.kafka.dynamic.metadata.ClusterMetadata;
import org.apache.flink.connector.kafka.dynamic.metadata.KafkaMetadataService;
import org.apache.flink.connector.kafka.dynamic.metadata.KafkaStream;

/**
 * A metadata service that knows one stream, fixed when the job is built: the stream id maps to one topic on each
 * benchmark cluster. The connector's own {@code SingleClusterTopicMetadataService} covers a single cluster only;
 * reading the same topic from two clusters as one stream is what the benchmark compares.
 */
final class TwoClusterMetadataService implements KafkaMetadataService {
    private static final long serialVersionUID = 1L;

    private final KafkaStream stream;

    TwoClusterMetadataService(String streamId, Map<String, ClusterMetadata> clusters) {
        this.stream = new KafkaStream(streamId, new HashMap<>(clusters));
    }

    @Override
    public Set<KafkaStream> getAllStreams() {
        return Set.of(stream);
    }

    @Override
    public Map<String, KafkaStream> describeStreams(Collection<String> streamIds) {
        Map<String, KafkaStream> found = new HashMap<>();
        if (streamIds.contains(stream.getStreamId())) {
            found.put(stream.getStreamId(), stream);
        }
        return found;
    }

    @Override
    public boolean isClusterActive(String kafkaClusterId) {
        return stream.getClusterMetadataMap().containsKey(kafkaClusterId);
    }

    @Override
    public void close() {
        // Nothing is held open: the metadata is fixed.
    }
}
