//! Query-string access.

use std::collections::HashMap;

/// Decoded query parameters (the last value of a repeated key wins, except
/// for `dryRun`, which is a list).
#[derive(Clone, Debug, Default)]
pub struct Query {
    map: HashMap<String, String>,
    dry_run_all: bool,
}

impl Query {
    pub fn parse(raw: Option<&str>) -> Query {
        let mut q = Query::default();
        for (k, v) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
            if k == "dryRun" && v == "All" {
                q.dry_run_all = true;
            }
            q.map.insert(k.into_owned(), v.into_owned());
        }
        q
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.map.get(key).map(String::as_str)
    }

    /// A boolean parameter: `true`/`1` or `false`/`0`; anything else is absent.
    pub fn flag(&self, key: &str) -> Option<bool> {
        match self.get(key)? {
            "true" | "1" | "True" => Some(true),
            "false" | "0" | "False" => Some(false),
            _ => None,
        }
    }

    pub fn dry_run(&self) -> bool {
        self.dry_run_all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes() {
        let q = Query::parse(Some("labelSelector=a%3Db%2Cc&watch=1&dryRun=All"));
        assert_eq!(q.get("labelSelector"), Some("a=b,c"));
        assert_eq!(q.flag("watch"), Some(true));
        assert!(q.dry_run());
    }
}
