//! The Service annotations ferrolb reads, with the MetalLB spellings accepted as aliases: the
//! shared rule, [`ferrolb_crds::annotations`], re-exported so the controller reads them through one
//! path.

pub use ferrolb_crds::annotations::{ADDRESS_POOL, ALLOW_SHARED_IP, LOAD_BALANCER_IPS, lookup};
