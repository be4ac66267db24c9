//! The internals that the integration tests, the memory measurements and the fuzz targets
//! drive directly, behind the `testing` feature (the crate's dev-dependency on itself turns it
//! on; the fuzz crate asks for it). Nothing here is API: a build without the feature has none
//! of it, so an item that only tests use is found as dead code. Two modules are its own, built
//! from inside the crate so that what they drive stays `pub(crate)`: the fuzz targets
//! ([`fuzz`]) and the situations the memory measurements weigh ([`memory`]). Every other module
//! re-exports, and mirrors the crate's module of the same name.

pub mod fuzz;
pub mod memory;

pub mod background {
    pub use crate::background::DEFAULT_LIMIT;
}

pub mod cache {
    pub use crate::cache::{
        FAILURE_TTL_FIRST, FAILURE_TTL_MAX, PREFETCH_MIN_HITS, RECHECK_PERIOD, STALE_TTL,
    };
}

pub mod certificates {
    pub use crate::certificates::{ClientIdentity, load, not_after};
}

pub mod gather {
    pub use crate::gather::PARTIAL_TTL;
}

pub mod metrics {
    pub use crate::metrics::FAMILIES;
}

pub mod reload {
    pub use crate::reload::SETTLE;
}

pub mod reply {
    pub use crate::reply::encode_fitted;
}

pub mod server {
    pub use crate::server::{
        ADMIN_MAX_CONNECTIONS, MAX_QUERY_FRAME, TCP_IDLE_TIMEOUT, TCP_MAX_CONNECTIONS,
        TCP_WRITE_TIMEOUT,
    };
}

pub mod upstream {
    pub use crate::upstream::names::MAX_RETRY;
    pub use crate::upstream::{INITIAL_RTO, MAX_RETRANSMITS, RTO_FLOOR, acceptable};
    pub mod stream {
        pub use crate::upstream::stream::{
            MAX_UNANSWERED_CONNECTIONS, StreamEndpoint, StreamError, StreamSettings,
        };
    }
}

pub mod wire {
    pub use crate::wire::for_each_record;
}
