//! Criterion benchmarks of the per-decision path.
fn main() {}
