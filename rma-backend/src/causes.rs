//! An error said with its causes, for where only text travels (a peer's share of a
//! collective's outcome).

/// `e`'s message followed by each of its sources, the way `rma::Error`'s Debug says them
/// ("mapping the segment failed: caused by: No space left on device (os error 28)").
pub fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(&format!(": caused by: {c}"));
        cause = c.source();
    }
    text
}
