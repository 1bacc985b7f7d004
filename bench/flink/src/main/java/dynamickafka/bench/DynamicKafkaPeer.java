package dynamickafka.bench;

import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.lang.management.ManagementFactory;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.RuntimeExecutionMode;
import org.apache.flink.api.common.accumulators.LongCounter;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.connector.kafka.dynamic.metadata.ClusterMetadata;
import org.apache.flink.connector.kafka.dynamic.source.DynamicKafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * The Flink peer of benchmark 8: Flink's Dynamic Kafka Source reads one stream (the same topic on two clusters)
 * from the given start offsets to the given end offsets, bounded, in a local MiniCluster; each record's value is
 * counted and then dropped by a {@link DiscardingSink}. Nothing is written anywhere.
 *
 * <p>Usage: {@code java -cp ... dynamickafka.bench.DynamicKafkaPeer SPEC.properties}. The spec names the stream,
 * the parallelism and, per cluster, its bootstrap servers, its topic and the {@code partition:start-end} ranges.
 * One JSON line on stdout reports the records and value bytes counted and the times.
 */
public final class DynamicKafkaPeer {
    private static final String RECORDS = "records";
    private static final String VALUE_BYTES = "value-bytes";

    private DynamicKafkaPeer() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: DynamicKafkaPeer SPEC.properties");
            System.exit(2);
        }
        Properties spec = load(args[0]);
        String streamId = required(spec, "stream");
        int parallelism = Integer.parseInt(required(spec, "parallelism"));

        Map<String, ClusterMetadata> clusters = new HashMap<>();
        for (String cluster : required(spec, "clusters").split(",")) {
            clusters.put(cluster, clusterMetadata(spec, cluster));
        }

        // A bounded job: batch mode is what Flink runs bounded pipelines in (no checkpoints, region scheduling).
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setParallelism(parallelism);
        env.setRuntimeMode(RuntimeExecutionMode.BATCH);
        // The source, the counter and the sink are chained in one task; without reuse each record's value
        // would be copied between them, work no real read-and-discard job would choose to do.
        env.getConfig().enableObjectReuse();

        DynamicKafkaSource<byte[]> source =
                DynamicKafkaSource.<byte[]>builder()
                        .setStreamIds(Set.of(streamId))
                        .setKafkaMetadataService(new TwoClusterMetadataService(streamId, clusters))
                        .setDeserializer(new ValueBytes())
                        // The per-cluster ranges in the metadata decide; these only mark the source bounded.
                        .setStartingOffsets(OffsetsInitializer.earliest())
                        .setBounded(OffsetsInitializer.latest())
                        .setGroupId("dynamic-kafka-bench-flink")
                        .setClientIdPrefix("dynamic-kafka-bench-flink")
                        // As the product reads: only committed records.
                        .setProperty("isolation.level", "read_committed")
                        .setProperty("commit.offsets.on.checkpoint", "false")
                        .build();

        env.fromSource(source, WatermarkStrategy.noWatermarks(), "dynamic-kafka-source")
                .map(new Count())
                .sinkTo(new DiscardingSink<>());

        long began = System.nanoTime();
        JobExecutionResult result = env.execute("dynamic-kafka-bench-flink");
        double executeSeconds = (System.nanoTime() - began) / 1e9;
        double sinceJvmStart =
                (System.currentTimeMillis() - ManagementFactory.getRuntimeMXBean().getStartTime()) / 1e3;
        long records = result.<Long>getAccumulatorResult(RECORDS);
        long valueBytes = result.<Long>getAccumulatorResult(VALUE_BYTES);
        System.out.println(
                String.format(
                        Locale.ROOT,
                        "{\"records\": %d, \"value_bytes\": %d, \"job_s\": %.3f, \"execute_s\": %.3f,"
                                + " \"jvm_s\": %.3f, \"parallelism\": %d}",
                        records,
                        valueBytes,
                        result.getNetRuntime() / 1e3,
                        executeSeconds,
                        sinceJvmStart,
                        parallelism));
    }

    private static ClusterMetadata clusterMetadata(Properties spec, String cluster) {
        String prefix = "cluster." + cluster + ".";
        String topic = required(spec, prefix + "topic");
        Properties kafka = new Properties();
        kafka.setProperty("bootstrap.servers", required(spec, prefix + "bootstrap"));
        Map<TopicPartition, Long> starts = new HashMap<>();
        Map<TopicPartition, Long> ends = new HashMap<>();
        for (String range : required(spec, prefix + "ranges").split(",")) {
            String[] partitionAndSpan = range.split(":");
            String[] span = partitionAndSpan[1].split("-");
            TopicPartition partition = new TopicPartition(topic, Integer.parseInt(partitionAndSpan[0]));
            starts.put(partition, Long.parseLong(span[0]));
            ends.put(partition, Long.parseLong(span[1]));
        }
        return new ClusterMetadata(
                Set.of(topic), kafka, OffsetsInitializer.offsets(starts), OffsetsInitializer.offsets(ends));
    }

    private static Properties load(String path) throws IOException {
        Properties spec = new Properties();
        try (InputStream in = new FileInputStream(path)) {
            spec.load(in);
        }
        return spec;
    }

    private static String required(Properties spec, String key) {
        String value = spec.getProperty(key);
        if (value == null || value.isBlank()) {
            throw new IllegalArgumentException("the spec has no " + key);
        }
        return value;
    }

    /** Hands on each record's value as it came from the consumer: no parsing, no copy. */
    static final class ValueBytes implements KafkaRecordDeserializationSchema<byte[]> {
        private static final long serialVersionUID = 1L;

        @Override
        public void deserialize(ConsumerRecord<byte[], byte[]> record, Collector<byte[]> out) {
            out.collect(record.value() == null ? new byte[0] : record.value());
        }

        @Override
        public TypeInformation<byte[]> getProducedType() {
            return PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO;
        }
    }

    /** Counts records and value bytes into job accumulators, which the job result carries back to main. */
    static final class Count extends RichMapFunction<byte[], byte[]> {
        private static final long serialVersionUID = 1L;

        private transient LongCounter records;
        private transient LongCounter valueBytes;

        @Override
        public void open(OpenContext context) {
            records = new LongCounter();
            valueBytes = new LongCounter();
            getRuntimeContext().addAccumulator(RECORDS, records);
            getRuntimeContext().addAccumulator(VALUE_BYTES, valueBytes);
        }

        @Override
        public byte[] map(byte[] value) {
            records.add(1L);
            valueBytes.add(value.length);
            return value;
        }
    }
}
