//! Test cluster harness (work in progress).
