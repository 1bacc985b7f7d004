"""The Python Protobuf decoder's throughput, one core, no Kafka and no JVM: what each Spark Python worker can do.

``python -m bench.protobuf [--records 100000] [--batch 10000] [--repeats 3]`` encodes the tests' ``shop.Order``
(a nested message, a repeated field, an enum and a map; two versions, half the records each) in the Confluent wire
format, then decodes them with :class:`~dynamic_kafka.registry.protobuf_codec.ProtobufDecoder` in Arrow batches of
``--batch`` values (Spark's default ``spark.sql.execution.arrow.maxRecordsPerBatch``), exactly as the UDF does on an
executor. Prints the median records/s by wall clock and by process CPU time (CPU is the figure to trust on a shared
machine).
"""

from __future__ import annotations

import argparse
import statistics
import time


def main(argv: list[str] | None = None) -> None:
    """Encode, decode, print the medians."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import BooleanType, StringType, StructType

    from devtools.testing.protobuf import descriptor_form, framed, message_class, order_file
    from dynamic_kafka.decoding.protobuf import descriptor_type, message_descriptor, union_struct, writer_file
    from dynamic_kafka.registry.protobuf_codec import OK_FIELD, WHY_FIELD, ProtobufDecoder

    parser = argparse.ArgumentParser(prog="python -m bench.protobuf", description=__doc__)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    files = {1: order_file(), 2: order_file(with_note=True)}
    writers = {i: writer_file(descriptor_form(f), f"version {i}") for i, f in files.items()}
    reader = union_struct([descriptor_type(message_descriptor(writers[i]), "bench") for i in (2, 1)])
    returned = StructType([*reader.fields]).add(OK_FIELD, BooleanType()).add(WHY_FIELD, StringType())
    classes = {i: message_class(f, "shop.Order") for i, f in files.items()}
    values = []
    for n in range(args.records):
        version = 1 + n % 2
        message = classes[version](id=n, tags=["a", "b", "c"][: n % 4], status=n % 2)
        message.customer.name = f"customer {n % 1000}"
        message.customer.points = n
        message.counts["items"] = n % 7
        if version == 2:
            message.note = "gift"
        values.append(framed(version, message))
    batches = [pa.array(values[i : i + args.batch], pa.binary()) for i in range(0, len(values), args.batch)]
    print(f"{args.records:,} records, {sum(map(len, values)) / len(values):.0f} bytes each, batches of {args.batch:,}")

    walls, cpus = [], []
    for _ in range(args.repeats):
        decoder = ProtobufDecoder(writers, to_arrow_type(returned))  # fresh: class building is part of the cost
        wall, cpu = time.perf_counter(), time.process_time()
        decoded = sum(len(decoder.decode(batch)) for batch in batches)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        assert decoded == args.records
    wall_s, cpu_s = statistics.median(walls), statistics.median(cpus)
    print(f"decode: {args.records / wall_s:,.0f} records/s wall, {args.records / cpu_s:,.0f} records/s CPU (median)")


if __name__ == "__main__":
    main()
