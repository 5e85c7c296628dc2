//! The fake model server's command line and knobs, also read by the fake
//! API server's simulator (`tests/support`), so that a pod there fails on
//! the same flags as the real process does on the real node.

pub mod flavor;
pub mod knobs;

/// The program each image tag runs (`tests/real-node/load-images`).
pub fn program_of_tag(tag: &str) -> Option<&'static str> {
    match tag {
        "vllm" => Some("vllm"),
        "sglang" => Some("sglang"),
        "tgi" => Some("text-generation-launcher"),
        _ => None,
    }
}
