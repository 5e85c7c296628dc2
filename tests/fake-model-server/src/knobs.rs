//! What a test asks of the fake beyond the real server's flags, through env
//! vars (`FAKE_*`), so that the command line stays exactly the preset's.

use std::time::Duration;

/// The behaviour a test chose.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Knobs {
    /// How long loading the model takes: the port opens only after it, as
    /// vLLM's does, so the startup probe really waits.
    pub load: Duration,
    /// Exit with this code, `crash_after` from the start.
    pub crash: Option<(i32, Duration)>,
    /// Time per generated token of `/v1/completions`, so that a request is
    /// in flight long enough to be drained.
    pub per_token: Duration,
    /// The first value of `vllm:num_requests_waiting`.
    pub waiting: i64,
}

/// Reads the knobs from `get` (the environment), with a message naming the
/// variable when one does not parse.
pub fn read(get: impl Fn(&str) -> Option<String>) -> Result<Knobs, String> {
    let seconds = |name: &str| -> Result<Duration, String> {
        match get(name) {
            None => Ok(Duration::ZERO),
            Some(v) => v
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(Duration::from_secs_f64)
                .ok_or_else(|| format!("{name}={v:?}: want seconds, such as 2.5")),
        }
    };
    let crash = match get("FAKE_CRASH_CODE") {
        None => None,
        Some(v) => {
            let code = v
                .parse::<i32>()
                .map_err(|_| format!("FAKE_CRASH_CODE={v:?}: want an exit code"))?;
            Some((code, seconds("FAKE_CRASH_AFTER_SECONDS")?))
        }
    };
    let per_token = match get("FAKE_TOKEN_MILLIS") {
        None => Duration::from_millis(5),
        Some(v) => v
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| format!("FAKE_TOKEN_MILLIS={v:?}: want milliseconds"))?,
    };
    let waiting = match get("FAKE_NUM_REQUESTS_WAITING") {
        None => 0,
        Some(v) => v
            .parse::<i64>()
            .map_err(|_| format!("FAKE_NUM_REQUESTS_WAITING={v:?}: want a number"))?,
    };
    Ok(Knobs {
        load: seconds("FAKE_LOAD_SECONDS")?,
        crash,
        per_token,
        waiting,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(pairs: &[(&str, &str)]) -> Result<Knobs, String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        read(|k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn nothing_set_is_a_server_that_starts_at_once_and_never_crashes() {
        let k = from(&[]).expect("defaults");
        assert_eq!((k.load, k.crash, k.waiting), (Duration::ZERO, None, 0));
    }

    #[test]
    fn a_crash_has_a_code_and_a_delay() {
        let k = from(&[
            ("FAKE_CRASH_CODE", "3"),
            ("FAKE_CRASH_AFTER_SECONDS", "1.5"),
            ("FAKE_LOAD_SECONDS", "4"),
        ])
        .expect("knobs");
        assert_eq!(k.crash, Some((3, Duration::from_millis(1500))));
        assert_eq!(k.load, Duration::from_secs(4));
    }

    #[test]
    fn a_bad_value_names_its_variable() {
        for (k, v) in [
            ("FAKE_LOAD_SECONDS", "soon"),
            ("FAKE_LOAD_SECONDS", "-1"),
            ("FAKE_CRASH_CODE", "x"),
            ("FAKE_TOKEN_MILLIS", "1.5"),
            ("FAKE_NUM_REQUESTS_WAITING", "many"),
        ] {
            let e = from(&[(k, v)]).expect_err(k);
            assert!(e.starts_with(k), "{e}");
        }
    }
}
