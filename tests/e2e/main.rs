//! End-to-end scenarios: the real operator binary against the fake API server
//! (default) or a real cluster (`MODELSERVICE_E2E=1`). See `harness`.

mod harness;
mod observe;
mod outage;
mod pod_http;
mod webhook_host;

mod autoscaling;
mod canary;
mod deletion;
mod diagnosis;
mod drift;
mod faults;
mod inference_pool;
mod keda;
mod keda_missing;
mod leader;
mod lifecycle;
mod local_run;
mod lws;
mod multinode;
mod multinode_missing;
mod ownership;
mod permissions;
mod process;
mod real_pods;
mod route_missing;
mod scale;
mod steady_state;
mod surge;
mod upgrade;
mod versions;
mod watching;
mod weights;
