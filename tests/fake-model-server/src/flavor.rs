//! Which server the binary plays, and that server's command line.
//!
//! The point of the fake is to refuse what the real server refuses: a preset
//! that passes `--model-id` to vLLM must crash the pod with exit code 2, as
//! vLLM's argument parser does, and not be served by a lenient stand-in. So
//! each flavor accepts only its own server's flags (the subset a model
//! operator passes), and the flavor comes from the program's name, as a real
//! image's entrypoint decides which server runs.

use clap::Parser;

/// The server being played.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    Vllm,
    Sglang,
    Tgi,
}

impl Flavor {
    /// From the program's file name: `vllm`, `sglang` or
    /// `text-generation-launcher` (TGI's); anything else plays vLLM, the
    /// runtime the operator assumes when no preset is given.
    pub fn from_program(argv0: &str) -> Self {
        let name = argv0.rsplit('/').next().unwrap_or(argv0);
        match name {
            "sglang" => Self::Sglang,
            "text-generation-launcher" | "tgi" => Self::Tgi,
            _ => Self::Vllm,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Vllm => "vllm",
            Self::Sglang => "sglang",
            Self::Tgi => "tgi",
        }
    }
}

/// What the command line decided, whichever flavor parsed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub model: String,
    /// The name `/v1/models` lists and `/v1/completions` answers to.
    pub served_name: String,
    pub host: String,
    pub port: u16,
}

/// vLLM's OpenAI server (`python -m vllm.entrypoints.openai.api_server`).
#[derive(Parser, Debug)]
#[command(name = "vllm")]
struct Vllm {
    /// vLLM's own default model.
    #[arg(long, default_value = "facebook/opt-125m")]
    model: String,
    #[arg(long, default_value_t = 8000)]
    port: u16,
    #[arg(long, default_value = "0.0.0.0")]
    host: String,
    #[arg(long, num_args = 1..)]
    served_model_name: Vec<String>,
    #[arg(long)]
    max_model_len: Option<u64>,
    #[arg(long)]
    seed: Option<u64>,
    #[arg(long)]
    tensor_parallel_size: Option<u32>,
    #[arg(long)]
    gpu_memory_utilization: Option<f64>,
    #[arg(long)]
    dtype: Option<String>,
    #[arg(long)]
    download_dir: Option<String>,
    #[arg(long)]
    trust_remote_code: bool,
    #[arg(long)]
    enable_prefix_caching: bool,
}

/// SGLang (`python -m sglang.launch_server`).
#[derive(Parser, Debug)]
#[command(name = "sglang")]
struct Sglang {
    /// Required, as SGLang's is.
    #[arg(long)]
    model_path: String,
    #[arg(long, default_value_t = 30000)]
    port: u16,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long)]
    served_model_name: Option<String>,
    #[arg(long)]
    tp_size: Option<u32>,
    #[arg(long)]
    mem_fraction_static: Option<f64>,
    #[arg(long)]
    context_length: Option<u64>,
    #[arg(long)]
    random_seed: Option<u64>,
    #[arg(long)]
    dtype: Option<String>,
    #[arg(long)]
    trust_remote_code: bool,
    /// SGLang serves /metrics only with it.
    #[arg(long)]
    enable_metrics: bool,
}

/// TGI's launcher, which also reads its flags from the environment
/// (`MODEL_ID`, `PORT`, `HOSTNAME`).
#[derive(Parser, Debug)]
#[command(name = "text-generation-launcher")]
struct Tgi {
    #[arg(long, env = "MODEL_ID", default_value = "bigscience/bloom-560m")]
    model_id: String,
    #[arg(long, env = "PORT", default_value_t = 3000)]
    port: u16,
    #[arg(long, env = "HOSTNAME", default_value = "0.0.0.0")]
    hostname: String,
    #[arg(long)]
    served_model_name: Option<String>,
    #[arg(long)]
    num_shard: Option<u32>,
    #[arg(long)]
    max_input_tokens: Option<u64>,
    #[arg(long)]
    max_total_tokens: Option<u64>,
    #[arg(long)]
    dtype: Option<String>,
    #[arg(long)]
    trust_remote_code: bool,
}

/// Parses `argv` as `flavor` does: an unknown flag or a missing required one
/// is a clap error, which exits with code 2 as Python's argparse does.
pub fn parse(flavor: Flavor, argv: &[String]) -> Result<Launch, clap::Error> {
    Ok(match flavor {
        Flavor::Vllm => {
            let a = Vllm::try_parse_from(argv)?;
            let served_name = a.served_model_name.first().unwrap_or(&a.model).clone();
            Launch {
                model: a.model,
                served_name,
                host: a.host,
                port: a.port,
            }
        }
        Flavor::Sglang => {
            let a = Sglang::try_parse_from(argv)?;
            Launch {
                served_name: a.served_model_name.unwrap_or_else(|| a.model_path.clone()),
                model: a.model_path,
                host: a.host,
                port: a.port,
            }
        }
        Flavor::Tgi => {
            let a = Tgi::try_parse_from(argv)?;
            Launch {
                served_name: a.served_model_name.unwrap_or_else(|| a.model_id.clone()),
                model: a.model_id,
                host: a.hostname,
                port: a.port,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        std::iter::once("server")
            .chain(s.split_whitespace())
            .map(String::from)
            .collect()
    }

    #[test]
    fn the_program_name_picks_the_flavor() {
        assert_eq!(Flavor::from_program("/usr/local/bin/vllm"), Flavor::Vllm);
        assert_eq!(Flavor::from_program("sglang"), Flavor::Sglang);
        assert_eq!(
            Flavor::from_program("/usr/local/bin/text-generation-launcher"),
            Flavor::Tgi
        );
        assert_eq!(Flavor::from_program("/anything"), Flavor::Vllm);
    }

    #[test]
    fn each_flavor_takes_its_own_model_flag_and_refuses_the_others() {
        let l = parse(Flavor::Vllm, &argv("--model m --port 9000")).expect("vllm");
        assert_eq!((l.model.as_str(), l.port), ("m", 9000));
        let l = parse(Flavor::Sglang, &argv("--model-path m --port 9000")).expect("sglang");
        assert_eq!((l.model.as_str(), l.port), ("m", 9000));
        let l = parse(Flavor::Tgi, &argv("--model-id m --port 9000")).expect("tgi");
        assert_eq!((l.model.as_str(), l.port), ("m", 9000));
        for (f, wrong) in [
            (Flavor::Vllm, "--model-id m"),
            (Flavor::Vllm, "--model-path m"),
            (Flavor::Sglang, "--model m"),
            (Flavor::Tgi, "--model m"),
        ] {
            let e = parse(f, &argv(wrong)).expect_err(wrong);
            assert_eq!(e.exit_code(), 2, "{f:?} {wrong}");
        }
    }

    #[test]
    fn an_unknown_flag_is_refused_with_exit_code_2() {
        let e = parse(Flavor::Vllm, &argv("--model m --no-such-flag")).expect_err("unknown");
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("--no-such-flag"), "{e}");
    }

    #[test]
    fn sglang_needs_its_model_path() {
        assert!(parse(Flavor::Sglang, &argv("--port 1")).is_err());
    }

    #[test]
    fn the_served_name_defaults_to_the_model() {
        let l = parse(Flavor::Vllm, &argv("--model m")).expect("vllm");
        assert_eq!((l.served_name.as_str(), l.port), ("m", 8000));
        let l = parse(Flavor::Vllm, &argv("--model m --served-model-name s")).expect("vllm");
        assert_eq!(l.served_name, "s");
    }
}
