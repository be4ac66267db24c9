//! The behaviour tests, in one binary: meshdns seen from outside — a client asking over UDP
//! and TCP, fake cluster DNS servers on 127.0.0.1, the built binary run as its operator runs
//! it — one module per behaviour of docs/design.md, and the check that the module tree matches
//! the code (the README's tables and the dashboard are checked beside the variable and metric
//! tables, in src/config/variables.rs and src/metrics.rs). A new test, a regression test
//! included, goes in the module of the behaviour it checks and is named after what must hold —
//! never in a module named after the review or the bug that found it. A fake or helper two
//! modules need goes in [`support`].
//!
//! One binary links the crate and compiles the shared fakes ([`support`]) once.
//! Tests run in parallel in this one process: none may set the environment, the working
//! directory or a process-wide limit of its own (a test that needs one runs the binary again as
//! a child, as `failure::a_local_resource_error_never_marks_an_endpoint_down` does). The memory
//! measurements, which count every allocation of their process, are `tests/memory/`; the fuzz
//! harness is `tests/fuzz.rs`.

#[path = "../support/mod.rs"]
mod support;

mod bad_input;
mod binary;
mod cache;
mod cluster_zones;
mod clusterset;
mod config_watch;
mod distributed;
mod dot;
mod dot_server;
mod failure;
mod fault_matrix;
mod floods;
mod live_config;
mod loops;
mod loss;
mod malformed_replies;
mod metrics;
mod module_tree;
mod namespaces;
mod operators;
mod out_of_zone_additionals;
mod own_names;
mod passthrough;
mod properties;
mod reverse;
mod search_list;
mod shutdown;
mod tcp;
mod truncation;
mod wire;
mod zone_apexes;
