//! The one escaper for text placed in XML or HTML (the campaign's HTML report, the SVG page map):
//! the five markup characters become entities, and control characters other than tab, newline and
//! carriage return — not allowed in XML 1.0 at all, even as references — become U+FFFD, so any
//! scenario name, cause or path leaves the document well-formed.

/// Escapes `s` for XML/HTML element content and for attribute values in either quote.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' && c != '\r' => o.push('\u{fffd}'),
            c => o.push(c),
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn markup_and_control_characters_are_escaped() {
        assert_eq!(escape(r#"a<b>&"c"'d'"#), "a&lt;b&gt;&amp;&quot;c&quot;&#39;d&#39;");
        assert_eq!(escape("x\u{1}y\tz\n\r"), "x\u{fffd}y\tz\n\r");
        assert_eq!(escape("plain-name_1.toml"), "plain-name_1.toml");
    }
}
