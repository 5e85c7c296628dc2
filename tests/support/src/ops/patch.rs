//! PATCH in all four content types.

use std::sync::Arc;

use serde_json::Value;

use super::update::{Tracking, finish_update};
use super::{Ctx, Sub};
use crate::patch::{BUILTIN_ACCEPTED, CUSTOM_ACCEPTED, PatchType, apply_patch};
use crate::status::{ApiError, FieldError};
use crate::store::Store;

/// Result of a PATCH: the stored object (at the request's version) and
/// whether it was created (apply).
pub struct Patched {
    pub object: Arc<Value>,
    pub created: bool,
}

/// Resolves the content type, rejecting what the real server rejects.
pub fn patch_type(ctx: &Ctx, content_type: &str) -> Result<PatchType, ApiError> {
    let accepted = if ctx.info.custom {
        CUSTOM_ACCEPTED
    } else {
        BUILTIN_ACCEPTED
    };
    match PatchType::from_content_type(content_type) {
        Some(PatchType::Strategic) if ctx.info.custom => {
            Err(ApiError::unsupported_media_type(accepted))
        }
        Some(t) => Ok(t),
        None => Err(ApiError::unsupported_media_type(accepted)),
    }
}

/// `PatchOptions` validation: the real server answers 422 before even
/// looking the object up.
pub fn check_options(ctx: &Ctx, kind: PatchType, force: Option<bool>) -> Result<(), ApiError> {
    let err = |e: FieldError| {
        Err(ApiError::invalid_kind(
            "PatchOptions",
            "meta.k8s.io",
            "",
            &[e],
        ))
    };
    if kind == PatchType::Apply && !ctx.manager_given {
        return err(FieldError::required(
            "fieldManager",
            "is required for apply patch",
        ));
    }
    if kind != PatchType::Apply && force.is_some() {
        return err(FieldError::forbidden(
            "force",
            "may not be specified for non-apply patch",
        ));
    }
    Ok(())
}

/// PATCH of an object or its `/status`; `/scale` goes to [`super::scale`].
pub fn patch(
    store: &mut Store,
    ctx: &Ctx,
    name: &str,
    kind: PatchType,
    body: &[u8],
    force: bool,
) -> Result<Patched, ApiError> {
    if kind == PatchType::Apply {
        return super::apply::apply(store, ctx, name, body, force);
    }
    if ctx.sub == Sub::Scale {
        let object = super::scale::patch_scale(store, ctx, name, kind, body)?;
        return Ok(Patched {
            object,
            created: false,
        });
    }
    // The patch applies to the object at the request's version.
    let cur = ctx.load(store, name)?;
    let mut doc = (*cur.view).clone();
    apply_patch(kind, &mut doc, body)?;
    let object = finish_update(store, ctx, &cur, doc, Tracking::Update)?;
    Ok(Patched {
        object,
        created: false,
    })
}
