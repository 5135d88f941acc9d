//! A form's field as every form draws it: its label, in the UI's language, above its control.

use leptos::attr::AttributeValue;
use leptos::prelude::*;

use crate::state::ctx;

/// `control` under the label whose i18n key is `label`, naming the control `for_id`.
pub fn labelled(label: &'static str, for_id: impl AttributeValue, control: impl IntoView) -> impl IntoView {
    let ctx = ctx();
    view! { <div class="field"><label for=for_id>{move || ctx.tr(label)}</label>{control}</div> }
}
