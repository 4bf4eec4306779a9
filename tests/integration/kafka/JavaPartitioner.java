// Prints the partition the Java producer's built-in partitioner picks for each hex-encoded key,
// one per line, so tests can check the Python murmur2 against the real kafka-clients code.
// Run as a single-file program: java -cp '<libs>/*' JavaPartitioner.java <partitions> <hexkey>...
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;

public class JavaPartitioner {
    public static void main(String[] args) {
        int partitions = Integer.parseInt(args[0]);
        for (int i = 1; i < args.length; i++) {
            byte[] key = java.util.HexFormat.of().parseHex(args[i]);
            System.out.println(BuiltInPartitioner.partitionForKey(key, partitions));
        }
    }
}
