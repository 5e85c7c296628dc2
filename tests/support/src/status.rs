//! `metav1.Status` error bodies shaped like the real API server's.
//!
//! Operators branch on `code` and `reason` (kube's `ErrorResponse`), and the
//! same scenarios run against a real cluster, so every failure the fake
//! produces is built here, with the real server's messages and `details`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::resources::ResourceInfo;

/// One `details.causes` entry of an Invalid error (a `field.Error`).
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    pub field: String,
    /// `FieldValueRequired`, `FieldValueInvalid`, `FieldValueForbidden`, ...
    pub reason: &'static str,
    /// The body after the field name, e.g. `Required value: is required`.
    pub message: String,
}

impl FieldError {
    pub fn required(field: &str, detail: &str) -> Self {
        FieldError {
            field: field.into(),
            reason: "FieldValueRequired",
            message: format!("Required value: {detail}"),
        }
    }

    pub fn invalid(field: &str, value: &str, detail: &str) -> Self {
        FieldError {
            field: field.into(),
            reason: "FieldValueInvalid",
            message: format!("Invalid value: {}: {detail}", json!(value)),
        }
    }

    pub fn forbidden(field: &str, detail: &str) -> Self {
        FieldError {
            field: field.into(),
            reason: "FieldValueForbidden",
            message: format!("Forbidden: {detail}"),
        }
    }
}

/// A failed request: HTTP code plus the Status body to send.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: u16,
    /// Empty for errors the real server sends without a reason.
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

/// The message of a stale-resourceVersion update; clients match on it.
pub const STALE_MESSAGE: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

fn details(info: &ResourceInfo, name: &str) -> Value {
    let mut d = Map::new();
    if !name.is_empty() {
        d.insert("name".into(), json!(name));
    }
    if !info.group.is_empty() {
        d.insert("group".into(), json!(info.group));
    }
    d.insert("kind".into(), json!(info.plural));
    Value::Object(d)
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// `deployments.apps "x" not found`.
    pub fn not_found(info: &ResourceInfo, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", info.group_resource()),
        )
        .with_details(details(info, name))
    }

    /// The namespace of a create does not exist.
    pub fn namespace_not_found(ns: &str) -> Self {
        Self::new(404, "NotFound", format!("namespaces \"{ns}\" not found"))
            .with_details(json!({"name": ns, "kind": "namespaces"}))
    }

    /// A known path with an unknown subresource.
    pub fn resource_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    pub fn already_exists(info: &ResourceInfo, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", info.group_resource()),
        )
        .with_details(details(info, name))
    }

    /// `Operation cannot be fulfilled on <gr> "<name>": <why>`.
    pub fn conflict(info: &ResourceInfo, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                info.group_resource()
            ),
        )
        .with_details(details(info, name))
    }

    /// Optimistic-concurrency failure on a stale `metadata.resourceVersion`.
    pub fn stale(info: &ResourceInfo, name: &str) -> Self {
        Self::conflict(info, name, STALE_MESSAGE)
    }

    /// 422 from validation: `<Kind.group> "<name>" is invalid: <errors>`.
    pub fn invalid(info: &ResourceInfo, name: &str, errors: &[FieldError]) -> Self {
        Self::invalid_kind(&info.kind, &info.group, name, errors)
    }

    pub fn invalid_kind(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> Self {
        let gk = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let parts: Vec<String> = errors
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        let joined = if parts.len() == 1 {
            parts[0].clone()
        } else {
            format!("[{}]", parts.join(", "))
        };
        let causes: Vec<Value> = errors
            .iter()
            .map(|e| json!({"reason": e.reason, "message": e.message, "field": e.field}))
            .collect();
        let mut d = Map::new();
        if !name.is_empty() {
            d.insert("name".into(), json!(name));
        }
        if !group.is_empty() {
            d.insert("group".into(), json!(group));
        }
        d.insert("kind".into(), json!(kind));
        d.insert("causes".into(), Value::Array(causes));
        Self::new(
            422,
            "Invalid",
            format!("{gk} \"{name}\" is invalid: {joined}"),
        )
        .with_details(Value::Object(d))
    }

    /// The 422 the real server returns when a JSON patch cannot be applied
    /// (including a failed `test` operation): a "generic server response".
    pub fn patch_unprocessable(cause: &str) -> Self {
        Self::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        )
        .with_details(json!({"causes": [{"reason": "UnexpectedServerResponse", "message": cause}]}))
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// `Internal error occurred: <msg>`, as from `errors.NewInternalError`.
    pub fn internal(message: &str) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
        .with_details(json!({"causes": [{"message": message}]}))
    }

    pub fn forbidden(info: &ResourceInfo, name: &str, why: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!("{} \"{name}\" is forbidden: {why}", info.group_resource()),
        )
        .with_details(details(info, name))
    }

    /// 410 Gone: the requested resourceVersion was compacted away.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
        .with_details(json!({}))
    }

    /// A create of a custom resource whose CRD is being deleted.
    pub fn create_while_terminating(info: &ResourceInfo) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "create not allowed while custom resource definition is terminating",
        )
        .with_details(json!({"group": info.group, "kind": info.plural}))
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {content_type}"
            ),
        )
        .with_details(json!({}))
    }

    /// An error of an arbitrary code, for fault injection.
    pub fn for_code(code: u16, info: Option<&ResourceInfo>, name: &str) -> Self {
        match (code, info) {
            (409, Some(info)) => Self::stale(info, name),
            (404, Some(info)) => Self::not_found(info, name),
            (500, _) => Self::internal("injected failure"),
            (429, _) => Self::new(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
            )
            .with_details(json!({"retryAfterSeconds": 1})),
            (503, _) => Self::new(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            ),
            (504, _) => Self::new(
                504,
                "Timeout",
                "the server was unable to return a response in the time allotted, but may still be processing the request",
            ),
            (410, _) => Self::expired("too old resource version"),
            (403, _) => Self::new(403, "Forbidden", "forbidden: injected failure"),
            (401, _) => Self::new(401, "Unauthorized", "Unauthorized"),
            (c, _) => Self::new(
                c,
                "",
                format!(
                    "the server responded with the status code {c} but did not return more information"
                ),
            ),
        }
    }

    /// The `Status` object, as sent in bodies and in watch ERROR events.
    pub fn to_status(&self) -> Value {
        let mut m = Map::new();
        m.insert("kind".into(), json!("Status"));
        m.insert("apiVersion".into(), json!("v1"));
        m.insert("metadata".into(), json!({}));
        m.insert("status".into(), json!("Failure"));
        m.insert("message".into(), json!(self.message));
        if !self.reason.is_empty() {
            m.insert("reason".into(), json!(self.reason));
        }
        if let Some(d) = &self.details {
            m.insert("details".into(), d.clone());
        }
        m.insert("code".into(), json!(self.code));
        Value::Object(m)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_response(code, &self.to_status())
    }
}

/// A JSON response with the given code.
pub fn json_response(code: StatusCode, body: &Value) -> Response {
    bytes_response(code, serde_json::to_vec(body).unwrap_or_default())
}

/// A pre-serialized JSON body.
pub fn bytes_response(code: StatusCode, body: Vec<u8>) -> Response {
    let mut resp = (code, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// What the real server sends for paths nothing is registered under (an
/// uninstalled CRD's group, a typo'd plural): Go's `http.NotFound`, plain text.
pub fn page_not_found() -> Response {
    let mut resp = (StatusCode::NOT_FOUND, "404 page not found\n").into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}
