# Root conftest: keeps benchmark scripts out of collection.
collect_ignore = ["benchmarks"]
