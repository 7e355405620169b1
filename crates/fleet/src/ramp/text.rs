//! A step's config text: the new config's text with each group's `ratio` set to the step's,
//! edited line by line so that everything else (comments, layout) stays as the pusher wrote
//! it. The caller validates the result and checks every ratio took ([`with_ratios`] returns
//! `None` for a layout it does not edit: inline tables, dotted keys).

/// One `[[listener.group]]` block: where it starts, its name, its `ratio` line.
struct Block {
    listener: String,
    header: usize,
    name: Option<String>,
    ratio: Option<usize>,
}

fn value_of(line: &str, key: &str) -> Option<String> {
    let rest = line.trim().strip_prefix(key)?.trim_start();
    let rest = rest.strip_prefix('=')?.trim();
    let rest = rest.split('#').next().unwrap_or(rest).trim();
    Some(rest.trim_matches('"').trim_matches('\'').to_owned())
}

/// `text` with the ratio of each `LISTENER/GROUP` of `ratios` set.
pub(super) fn with_ratios(text: &str, ratios: &[(String, f64)]) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks: Vec<Block> = Vec::new();
    let mut listener = String::new();
    // 0: elsewhere, 1: a listener's own keys, 2: a group's own keys.
    let mut at = 0;
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim();
        if t.starts_with('[') {
            let header: String = t
                .split('#')
                .next()
                .unwrap_or(t)
                .split_whitespace()
                .collect();
            at = match header.as_str() {
                "[[listener]]" => {
                    listener.clear();
                    1
                }
                "[[listener.group]]" => {
                    blocks.push(Block {
                        listener: listener.clone(),
                        header: i,
                        name: None,
                        ratio: None,
                    });
                    2
                }
                _ => 0,
            };
            continue;
        }
        match at {
            1 => {
                if let Some(v) = value_of(t, "name") {
                    listener = v;
                }
            }
            2 => {
                let b = blocks.last_mut().expect("a group block");
                if let Some(v) = value_of(t, "name") {
                    b.name = Some(v);
                } else if value_of(t, "ratio").is_some() {
                    b.ratio = Some(i);
                }
            }
            _ => {}
        }
    }
    let mut out: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    let mut inserts: Vec<(usize, String)> = Vec::new();
    for (name, ratio) in ratios {
        let (l, g) = name.split_once('/')?;
        let b = blocks
            .iter()
            .find(|b| b.listener == l && b.name.as_deref() == Some(g))?;
        match b.ratio {
            Some(i) => {
                let indent: String = out[i].chars().take_while(|c| c.is_whitespace()).collect();
                out[i] = format!("{indent}ratio = {}", number(*ratio));
            }
            None => inserts.push((b.header + 1, format!("ratio = {}", number(*ratio)))),
        }
    }
    inserts.sort_by_key(|b| std::cmp::Reverse(b.0));
    for (i, line) in inserts {
        out.insert(i, line);
    }
    let mut text_out = out.join("\n");
    if text.ends_with('\n') {
        text_out.push('\n');
    }
    Some(text_out)
}

/// A ratio as TOML reads it back exactly: an integer when it is one, else a float.
fn number(r: f64) -> String {
    if r.fract() == 0.0 && r.abs() < 1e15 {
        format!("{}", r as i64)
    } else {
        format!("{r:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_set_in_place_and_the_rest_is_kept() {
        let text = "# top\n[[listener]]\nname = \"web\"\n  [[listener.group]]\n  name = \"a\"\n  \
                    ratio = 50 # half\n    [[listener.group.endpoint]]\n    address = \"x\"\n  \
                    [[listener.group]]\n  ratio = 50\n  name = \"b\"\n[[listener]]\nname = \
                    \"udp\"\n  [[listener.group]]\n  name = \"a\"\n";
        let out = with_ratios(
            text,
            &[
                ("web/a".to_owned(), 62.5),
                ("web/b".to_owned(), 100.0),
                ("udp/a".to_owned(), 7.0),
            ],
        )
        .unwrap();
        assert!(
            out.contains("  ratio = 62.5\n    [[listener.group.endpoint]]"),
            "{out}"
        );
        assert!(out.contains("  ratio = 100\n  name = \"b\""), "{out}");
        assert!(
            out.contains("[[listener.group]]\nratio = 7\n  name = \"a\""),
            "{out}"
        );
        assert!(out.starts_with("# top\n") && out.ends_with('\n'), "{out}");
        assert!(with_ratios(text, &[("web/zz".to_owned(), 1.0)]).is_none());
    }
}
