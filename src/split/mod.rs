//! Between groups: priority, cascade, failover, group choice (SPEC 3). Being written.
