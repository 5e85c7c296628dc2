//! How `model.name` and `runtime.port` reach a serving runtime.
//!
//! Runtimes disagree on the flag that names the model, so a preset picks it.
//! No preset at all means vLLM's flags without the env vars: that is what
//! v1alpha1 always did, and an object converted from v1alpha1 must keep
//! exactly the pod template it had, or upgrading the operator would restart
//! every model.

use k8s_openapi::api::core::v1::EnvVar;

use crate::api::Preset;

/// The env vars every explicit preset sets, so an image's entrypoint can read
/// them whatever its flags are.
const PRESET_ENV: &[&str] = &["MODEL_NAME", "PORT"];

/// The arguments that come before `runtime.args` (`user`).
///
/// SGLang, unlike vLLM and TGI, listens on 127.0.0.1 unless told otherwise,
/// where neither the kubelet's probes nor the Service reach it: a model
/// with the `sglang` preset never became Ready on a real node. So the preset
/// also passes `--host 0.0.0.0`, unless `runtime.args` already sets a host:
/// the objects that worked around it keep their pod template, and so their
/// pods, across the operator's upgrade.
///
/// With `metrics` (an InferencePool's endpoint picker reads each server's
/// `/metrics`), SGLang also gets `--enable-metrics`, without which it serves
/// none; vLLM and TGI always serve theirs.
///
/// With weights from the cache (`path`), the server loads that directory
/// and, where the runtime has the flag, still serves under `model`:
/// clients keep asking for the name they know.
pub fn args(
    preset: Option<Preset>,
    model: &str,
    path: Option<&str>,
    port: i32,
    user: &[String],
    metrics: bool,
) -> Vec<String> {
    let flag = match preset {
        None | Some(Preset::Vllm) => "--model",
        Some(Preset::Sglang) => "--model-path",
        Some(Preset::Tgi) => "--model-id",
        Some(Preset::None) => return Vec::new(),
    };
    let mut args = vec![
        flag.to_string(),
        path.unwrap_or(model).to_string(),
        "--port".to_string(),
        port.to_string(),
    ];
    // TGI has no such flag: it answers to any model name.
    if path.is_some() && preset != Some(Preset::Tgi) {
        args.extend(["--served-model-name".to_string(), model.to_string()]);
    }
    let sets_host = user
        .iter()
        .any(|a| a == "--host" || a.starts_with("--host="));
    if preset == Some(Preset::Sglang) && !sets_host {
        args.extend(["--host".to_string(), "0.0.0.0".to_string()]);
    }
    if preset == Some(Preset::Sglang) && metrics && !user.iter().any(|a| a == "--enable-metrics") {
        args.push("--enable-metrics".to_string());
    }
    args
}

/// The env var names the preset sets, which `runtime.env` may not repeat.
pub fn env_names(preset: Option<Preset>) -> &'static [&'static str] {
    match preset {
        None => &[],
        Some(_) => PRESET_ENV,
    }
}

/// The env vars that come before `runtime.env`; with cached weights, an
/// explicit preset also says where they are (MODEL_PATH).
pub fn env(preset: Option<Preset>, model: &str, path: Option<&str>, port: i32) -> Vec<EnvVar> {
    let var = |name: &str, value: String| EnvVar {
        name: name.to_string(),
        value: Some(value),
        value_from: None,
    };
    let mut env: Vec<EnvVar> = env_names(preset)
        .iter()
        .zip([model.to_string(), port.to_string()])
        .map(|(name, value)| var(name, value))
        .collect();
    if let (Some(_), Some(path)) = (preset, path) {
        env.push(var("MODEL_PATH", path.to_string()));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_preset_names_the_model_its_own_way() {
        let a = |p| args(p, "m", None, 9000, &[], false).join(" ");
        assert_eq!(a(None), "--model m --port 9000");
        assert_eq!(a(Some(Preset::Vllm)), "--model m --port 9000");
        assert_eq!(
            a(Some(Preset::Sglang)),
            "--model-path m --port 9000 --host 0.0.0.0"
        );
        assert_eq!(a(Some(Preset::Tgi)), "--model-id m --port 9000");
        assert_eq!(a(Some(Preset::None)), "");
    }

    #[test]
    fn cached_weights_are_loaded_from_their_path_under_the_same_name() {
        let a = |p| args(p, "org/m", Some("/models/m-1"), 9000, &[], false).join(" ");
        assert_eq!(
            a(Some(Preset::Vllm)),
            "--model /models/m-1 --port 9000 --served-model-name org/m"
        );
        assert_eq!(a(None), a(Some(Preset::Vllm)));
        assert_eq!(
            a(Some(Preset::Sglang)),
            "--model-path /models/m-1 --port 9000 --served-model-name org/m --host 0.0.0.0"
        );
        assert_eq!(a(Some(Preset::Tgi)), "--model-id /models/m-1 --port 9000");
        assert_eq!(a(Some(Preset::None)), "");
    }

    #[test]
    fn sglang_listens_beyond_loopback_unless_the_args_set_a_host() {
        for user in [["--host", "::"].as_slice(), ["--host=10.0.0.1"].as_slice()] {
            let user: Vec<String> = user.iter().map(|s| s.to_string()).collect();
            assert_eq!(
                args(Some(Preset::Sglang), "m", None, 9000, &user, false).join(" "),
                "--model-path m --port 9000",
                "{user:?}"
            );
        }
        let other = vec!["--hostname".to_string(), "x".to_string()];
        assert!(
            args(Some(Preset::Sglang), "m", None, 1, &other, false)
                .contains(&"0.0.0.0".to_string())
        );
    }

    #[test]
    fn sglang_serves_metrics_for_an_endpoint_picker_and_vllm_needs_no_flag() {
        let a = |p, user: &[String]| args(p, "m", None, 1, user, true);
        assert_eq!(
            a(Some(Preset::Sglang), &[]).last().map(String::as_str),
            Some("--enable-metrics")
        );
        let once = vec!["--enable-metrics".to_string()];
        assert!(!a(Some(Preset::Sglang), &once).contains(&"--enable-metrics".to_string()));
        assert!(!a(Some(Preset::Vllm), &[]).contains(&"--enable-metrics".to_string()));
        assert!(!a(None, &[]).contains(&"--enable-metrics".to_string()));
    }

    #[test]
    fn explicit_presets_set_model_name_and_port_and_no_preset_sets_nothing() {
        assert!(env(None, "m", None, 8000).is_empty());
        assert!(env(None, "m", Some("/models/x"), 8000).is_empty());
        for p in [Preset::Vllm, Preset::Sglang, Preset::Tgi, Preset::None] {
            let e: Vec<(String, Option<String>)> = env(Some(p), "m", None, 8000)
                .into_iter()
                .map(|e| (e.name, e.value))
                .collect();
            assert_eq!(
                e,
                [
                    ("MODEL_NAME".to_string(), Some("m".to_string())),
                    ("PORT".to_string(), Some("8000".to_string()))
                ],
                "{p:?}"
            );
        }
    }
}
