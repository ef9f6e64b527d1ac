"""ICWBench: the benchmark dataset, its runner, scoring, quality and attacks."""
