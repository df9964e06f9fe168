//! The Helm chart `deploy/helm/ferrolb/` is generated from the kustomize base `deploy/`, so the
//! two installs can never drift (issue #12 part 3). `ferrolb-helmgen` writes it;
//! `tests/tests/helm_chart_fresh.rs` fails when the committed chart differs from what this module
//! produces, and `tests/tests/helm_chart.rs` checks that `helm template` with default values is
//! the kustomize render, modulo the documented differences.
//!
//! What is generated, and how:
//!
//! - `templates/<file>` for every resource of `deploy/kustomization.yaml`, in its order: the base
//!   file's text, comments included, with value references put in at a few anchors. Every
//!   object's `metadata.labels` gets the chart's labels (`ferrolb.labels`: the base's
//!   `app.kubernetes.io/part-of` plus Helm's standard labels; never selectors or pod templates,
//!   like the base's `includeSelectors: false`); the namespace's name becomes
//!   `ferrolb.namespace`, the membership-key Secret's name (the speaker's
//!   `FERROLB_MEMBERLIST_SECRET`) `ferrolb.memberlistSecret`, the image `ferrolb.image`; the Namespace and the CRDs can be
//!   switched on and off (`namespace.create`, `crds.create`; the Namespace is off by default and
//!   `ferrolb.namespace` is then the release namespace, so `helm install -n ferrolb-system
//!   --create-namespace` works, issue #28) and the CRDs carry `helm.sh/resource-policy: keep` (`crds.keep`). In the
//!   controller Deployment and the speaker DaemonSet, `resources`, `tolerations`,
//!   `imagePullPolicy` and the speaker's `FERROLB_TIMING_PROFILE` and `FERROLB_EXCLUDE_INTERFACES`
//!   become values, and
//!   `imagePullSecrets`, `priorityClassName` and the optional environment (`lbClass`,
//!   `defaultClass`, `ignoreExcludeLb`, `ignoreCordon`, `speaker.interfaces`, `extraEnv`) are added. With
//!   `memberlist.existingSecret` the controller gets `FERROLB_CREATE_MEMBERLIST_SECRET=false` and
//!   its Role loses the Secret rules (it neither creates nor reads the user's key).
//! - The chart creates **no** Secret: the controller creates the membership key when it is absent
//!   (issue #27). A chart that drew one with `randBytes` rendered a new key on every
//!   `helm template` (Argo CD, Flux) and split the membership on every sync.
//! - `values.yaml`: the defaults that exist in the base are read from it (image
//!   repository and pull policy, resources, tolerations, timing profile, interface exclusions).
//! - `Chart.yaml`: `version` and `appVersion` are the workspace's crate version.
//!
//! A base file that no longer has the shape an anchor expects is an error naming the file, never
//! a silently different chart. The files listed in [`HAND_WRITTEN`] are not generated.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail, ensure};
use serde::Deserialize;
use serde_json::Value;

/// The chart directory, relative to the repository root.
pub const CHART_DIR: &str = "deploy/helm/ferrolb";

/// The command that regenerates the chart.
pub const GENERATOR: &str = "cargo run -p ferrolb-tests --bin ferrolb-helmgen";

/// Files of the chart written by hand, relative to the chart directory: what the kustomize base
/// has no counterpart for (the helpers, the metrics Services and ServiceMonitor, the notes, the
/// values' JSON schema). Everything else in the chart
/// is generated.
pub const HAND_WRITTEN: &[&str] = &[
    ".helmignore",
    "templates/NOTES.txt",
    "templates/_helpers.tpl",
    "templates/monitoring.yaml",
    "values.schema.json",
];

/// The chart's version and appVersion: the workspace's crate version.
pub const CHART_VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(Deserialize)]
struct Kustomization {
    resources: Vec<String>,
    #[serde(default)]
    labels: Vec<LabelSet>,
    #[serde(default)]
    images: Vec<Image>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LabelSet {
    #[serde(default)]
    include_selectors: bool,
    #[serde(default)]
    include_templates: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Image {
    name: String,
    new_name: Option<String>,
}

/// Names the anchors look for, read from the base before any file is rewritten.
struct Base {
    /// The install namespace (the base's one Namespace).
    namespace: String,
    /// The membership-key Secret the speakers read and the controller creates
    /// (`FERROLB_MEMBERLIST_SECRET` of both workloads).
    memberlist_secret: String,
    /// The image name in the workloads and kustomization.yaml's `images:`.
    image_name: String,
}

/// A block of YAML lines under a `key:` line, as found in the base.
struct Block {
    /// Comment lines directly above the key, at its indentation.
    comments: Vec<String>,
    /// Indentation of the key.
    indent: usize,
    /// The lines of its value (not the key line).
    lines: Vec<String>,
}

/// Per workload: what becomes `values.yaml` defaults.
#[derive(Default)]
struct Workload {
    resources: Option<Block>,
    tolerations: Option<Block>,
}

/// The defaults `values.yaml` takes from the base.
#[derive(Default)]
struct Defaults {
    pull_policy: Option<String>,
    timing_profile: Option<String>,
    exclude_interfaces: Option<Vec<String>>,
    images: usize,
    controller: Workload,
    speaker: Workload,
}

/// Every generated file of the chart: (path relative to [`CHART_DIR`], content).
///
/// # Errors
/// A base file is missing, does not parse, or no longer has the shape an anchor expects.
pub fn generate(root: &Path) -> anyhow::Result<Vec<(PathBuf, String)>> {
    let deploy = root.join("deploy");
    let read = |file: &str| {
        std::fs::read_to_string(deploy.join(file)).with_context(|| format!("reading deploy/{file}"))
    };
    let kustomization: Kustomization = serde_saphyr::from_str(&read("kustomization.yaml")?)
        .context("parsing deploy/kustomization.yaml")?;
    ensure!(
        kustomization
            .labels
            .iter()
            .all(|l| !l.include_selectors && !l.include_templates),
        "deploy/kustomization.yaml: the chart puts its labels on metadata only, like \
         `includeSelectors: false` (and no `includeTemplates`); update tests/src/chart.rs"
    );
    let [image] = kustomization.images.as_slice() else {
        bail!("deploy/kustomization.yaml: expected exactly one entry under `images:`");
    };

    let mut texts = Vec::new();
    let mut objects = Vec::new();
    for file in &kustomization.resources {
        let text = read(file)?;
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&text).with_context(|| format!("parsing deploy/{file}"))?;
        objects.extend(docs.into_iter().filter(|d| !d.is_null()));
        texts.push((file, text));
    }
    let base = Base::from_objects(&objects, &image.name)?;

    let mut defaults = Defaults::default();
    let mut out = Vec::new();
    for (file, text) in texts {
        let template = template(file, &text, &base, &mut defaults)
            .with_context(|| format!("deploy/{file}"))?;
        out.push((Path::new("templates").join(file), template));
    }
    ensure!(
        defaults.images == 2,
        "expected the image in exactly two workloads, found {}",
        defaults.images
    );
    let repository = image.new_name.clone().unwrap_or_else(|| image.name.clone());
    out.push((PathBuf::from("Chart.yaml"), chart_yaml()));
    out.push((
        PathBuf::from("values.yaml"),
        values_yaml(&base, &repository, &defaults)?,
    ));
    Ok(out)
}

impl Base {
    fn from_objects(objects: &[Value], image_name: &str) -> anyhow::Result<Base> {
        let of_kind =
            |kind: &str| -> Vec<&Value> { objects.iter().filter(|o| o["kind"] == kind).collect() };
        let [namespace] = of_kind("Namespace")[..] else {
            bail!("the base must hold exactly one Namespace");
        };
        let [daemonset] = of_kind("DaemonSet")[..] else {
            bail!("the base must hold exactly one DaemonSet (the speaker)");
        };
        let [deployment] = of_kind("Deployment")[..] else {
            bail!("the base must hold exactly one Deployment (the controller)");
        };
        let secret_of = |workload: &Value| -> Option<String> {
            workload["spec"]["template"]["spec"]["containers"][0]["env"]
                .as_array()?
                .iter()
                .find(|e| e["name"] == "FERROLB_MEMBERLIST_SECRET")?["value"]
                .as_str()
                .map(str::to_owned)
        };
        let Some(secret) = secret_of(daemonset) else {
            bail!("the speaker DaemonSet must set FERROLB_MEMBERLIST_SECRET (the membership key)");
        };
        ensure!(
            secret_of(deployment).as_ref() == Some(&secret),
            "the controller Deployment must set FERROLB_MEMBERLIST_SECRET={secret}, as the speaker"
        );
        ensure!(
            daemonset["spec"]["template"]["spec"]["volumes"].is_null(),
            "the speaker DaemonSet mounts a volume; the chart has no value for it"
        );
        Ok(Base {
            namespace: namespace["metadata"]["name"]
                .as_str()
                .context("Namespace without a name")?
                .to_owned(),
            memberlist_secret: secret,
            image_name: image_name.to_owned(),
        })
    }
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

fn is_comment_or_blank(line: &str) -> bool {
    let t = line.trim_start();
    t.is_empty() || t.starts_with('#')
}

/// End (exclusive) of the value of the `key:` line at `at`: deeper-indented lines and sequence
/// items at the key's own indentation, with blank and comment lines between them.
fn block_end(lines: &[String], at: usize) -> usize {
    let n = indent(&lines[at]);
    let mut end = at + 1;
    for (i, line) in lines.iter().enumerate().skip(at + 1) {
        if is_comment_or_blank(line) {
            continue;
        }
        let t = line.trim_start();
        if indent(line) > n || (indent(line) == n && t.starts_with("- ")) {
            end = i + 1;
        } else {
            break;
        }
    }
    end
}

/// The single line whose trimmed text is `text`, or an error.
fn find_line(lines: &[String], text: &str) -> anyhow::Result<usize> {
    let found: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].trim() == text)
        .collect();
    match found[..] {
        [i] => Ok(i),
        _ => bail!("expected exactly one line `{text}`, found {}", found.len()),
    }
}

/// Replaces `token` where it stands as a whole name (not inside a longer name) in `line`.
fn replace_token(line: &str, token: &str, with: &str) -> String {
    let name_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.';
    let mut out = String::new();
    let mut rest = line;
    while let Some(pos) = rest.find(token) {
        let before = rest[..pos].chars().next_back();
        let after = rest[pos + token.len()..].chars().next();
        out.push_str(&rest[..pos]);
        if before.is_some_and(name_char) || after.is_some_and(name_char) {
            out.push_str(token);
        } else {
            out.push_str(with);
        }
        rest = &rest[pos + token.len()..];
    }
    out.push_str(rest);
    out
}

/// Takes the block of the `key:` line at `at` out of `lines` (key, value and the comments
/// directly above), returning it and the index where it stood.
fn take_block(lines: &mut Vec<String>, at: usize) -> (Block, usize) {
    let n = indent(&lines[at]);
    let mut first = at;
    while first > 0
        && lines[first - 1].trim_start().starts_with('#')
        && indent(&lines[first - 1]) == n
    {
        first -= 1;
    }
    let end = block_end(lines, at);
    let comments = lines[first..at].to_vec();
    let value = lines[at + 1..end].to_vec();
    // The comments stay in the template; key and value go.
    lines.drain(at..end);
    (
        Block {
            comments,
            indent: n,
            lines: value,
        },
        at,
    )
}

fn pad(n: usize) -> String {
    " ".repeat(n)
}

/// One base file as a chart template.
fn template(
    file: &str,
    text: &str,
    base: &Base,
    defaults: &mut Defaults,
) -> anyhow::Result<String> {
    // Helm would evaluate `{{` in the base's text (comments included); the base has none.
    ensure!(
        !text.contains("{{"),
        "holds `{{{{`, which Helm would evaluate; escape it in tests/src/chart.rs"
    );
    let mut docs: Vec<Vec<String>> = vec![Vec::new()];
    for line in text.lines() {
        if line == "---" {
            docs.push(Vec::new());
        } else if let Some(doc) = docs.last_mut() {
            doc.push(line.to_owned());
        }
    }
    let mut wrap = None;
    let mut rendered = Vec::new();
    for mut doc in docs {
        let kind = doc
            .iter()
            .find_map(|l| l.strip_prefix("kind: "))
            .context("a document without `kind:`")?
            .trim()
            .to_owned();
        for line in doc.iter_mut().filter(|l| !is_comment_or_blank(l)) {
            *line = replace_token(
                line,
                &base.namespace,
                "{{ include \"ferrolb.namespace\" . }}",
            );
            *line = replace_token(
                line,
                &base.memberlist_secret,
                "{{ include \"ferrolb.memberlistSecret\" . }}",
            );
        }
        metadata(&mut doc, &kind)?;
        if file == "controller-rbac.yaml" && kind == "Role" {
            unless_existing_secret(&mut doc)?;
        }
        match kind.as_str() {
            "Namespace" => wrap = Some("namespace.create"),
            "CustomResourceDefinition" => wrap = Some("crds.create"),
            "Deployment" => workload(&mut doc, base, defaults, "controller")?,
            "DaemonSet" => workload(&mut doc, base, defaults, "speaker")?,
            _ => {}
        }
        for line in doc.iter().filter(|l| !is_comment_or_blank(l)) {
            for name in [&base.namespace, &base.memberlist_secret] {
                ensure!(
                    replace_token(line, name, "") == *line,
                    "{name} left in `{line}`"
                );
            }
        }
        rendered.push(doc.join("\n"));
    }
    let mut out =
        format!("{{{{- /* Generated from deploy/{file} by `{GENERATOR}`; never edit. */ -}}}}\n");
    if let Some(value) = wrap {
        ensure!(rendered.len() == 1, "expected one object");
        out.push_str(&format!("{{{{- if .Values.{value} }}}}\n"));
    }
    out.push_str(&rendered.join("\n---\n"));
    out.push('\n');
    if wrap.is_some() {
        out.push_str("{{- end }}\n");
    }
    Ok(out)
}

/// The chart's labels on the object's metadata, and the CRDs' resource policy.
fn metadata(doc: &mut Vec<String>, kind: &str) -> anyhow::Result<()> {
    let meta = find_line_at(doc, "metadata:", 0)?;
    let end = block_end(doc, meta);
    let labels = (meta + 1..end).find(|&i| doc[i] == "  labels:");
    let include = "    {{- include \"ferrolb.labels\" . | nindent 4 }}".to_owned();
    let insert = match labels {
        Some(i) => {
            doc.insert(i + 1, include);
            end + 1
        }
        None => {
            let name = (meta + 1..end)
                .find(|&i| doc[i].starts_with("  name: "))
                .context("metadata without a name")?;
            doc.splice(name + 1..name + 1, ["  labels:".to_owned(), include]);
            end + 2
        }
    };
    if kind == "CustomResourceDefinition" {
        ensure!(
            !doc[meta..insert].iter().any(|l| l == "  annotations:"),
            "a CRD with annotations; update tests/src/chart.rs"
        );
        // At the end of metadata.
        doc.splice(
            insert..insert,
            [
                "  {{- if .Values.crds.keep }}",
                "  annotations:",
                "    helm.sh/resource-policy: keep",
                "  {{- end }}",
            ]
            .map(str::to_owned),
        );
    }
    Ok(())
}

/// The controller Role's rules on Secrets (create the membership key, get it by name), wrapped in
/// `if not .Values.memberlist.existingSecret`: with the user's own key the controller neither
/// creates nor reads it.
fn unless_existing_secret(doc: &mut Vec<String>) -> anyhow::Result<()> {
    let items: Vec<usize> = (0..doc.len())
        .filter(|&i| {
            doc[i].starts_with("- ")
                && doc
                    .get(i + 1)
                    .is_some_and(|l| l.trim() == "resources: [secrets]")
        })
        .collect();
    let (Some(&first), Some(&last)) = (items.first(), items.last()) else {
        bail!("the controller Role has no rule on secrets; update tests/src/chart.rs");
    };
    let mut end = last + 1;
    while end < doc.len() && indent(&doc[end]) > 0 && !is_comment_or_blank(&doc[end]) {
        end += 1;
    }
    ensure!(
        doc[first..end]
            .iter()
            .all(|l| l.starts_with("  ") || l.starts_with("- apiGroups:")),
        "the controller Role's Secret rules are not adjacent; update tests/src/chart.rs"
    );
    doc.insert(end, "{{- end }}".to_owned());
    doc.insert(
        first,
        "{{- if not .Values.memberlist.existingSecret }}".to_owned(),
    );
    Ok(())
}

/// The single line `text` at indentation `n`.
fn find_line_at(lines: &[String], text: &str, n: usize) -> anyhow::Result<usize> {
    let found: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].trim() == text && indent(&lines[i]) == n)
        .collect();
    match found[..] {
        [i] => Ok(i),
        _ => bail!(
            "expected exactly one line `{text}` at indentation {n}, found {}",
            found.len()
        ),
    }
}

/// The controller Deployment or the speaker DaemonSet: image, pull policy, resources,
/// tolerations, priority class, pull secrets and the optional environment.
fn workload(
    doc: &mut Vec<String>,
    base: &Base,
    defaults: &mut Defaults,
    component: &str,
) -> anyhow::Result<()> {
    let values = format!(".Values.{component}");
    // The image: one container, `image: NAME[:TAG]` (the tag is the chart's, see values.yaml).
    for line in doc.iter_mut() {
        let t = line.trim_start();
        if let Some(image) = t.strip_prefix("image: ") {
            ensure!(
                image == base.image_name || image.starts_with(&format!("{}:", base.image_name)),
                "image {image} is not {} from kustomization.yaml",
                base.image_name
            );
            *line = format!(
                "{}image: {{{{ include \"ferrolb.image\" . | quote }}}}",
                pad(indent(line))
            );
            defaults.images += 1;
        } else if let Some(policy) = t.strip_prefix("imagePullPolicy: ") {
            let policy = policy.trim().to_owned();
            if let Some(seen) = &defaults.pull_policy {
                ensure!(*seen == policy, "the workloads' imagePullPolicy differ");
            }
            defaults.pull_policy = Some(policy);
            *line = format!(
                "{}imagePullPolicy: {{{{ .Values.image.pullPolicy }}}}",
                pad(indent(line))
            );
        }
    }

    // Container resources.
    let at = find_line(doc, "resources:")?;
    let (block, at) = take_block(doc, at);
    let n = block.indent;
    doc.splice(
        at..at,
        [
            format!("{}{{{{- with {values}.resources }}}}", pad(n)),
            format!("{}resources:", pad(n)),
            format!("{}{{{{- toYaml . | nindent {} }}}}", pad(n + 2), n + 2),
            format!("{}{{{{- end }}}}", pad(n)),
        ],
    );
    let workload = match component {
        "controller" => &mut defaults.controller,
        _ => &mut defaults.speaker,
    };
    workload.resources = Some(block);

    // Pod-level: tolerations from the base become the default; pull secrets and priority class
    // are added after serviceAccountName.
    let sa = find_line(doc, &format!("serviceAccountName: ferrolb-{component}"))?;
    let p = indent(&doc[sa]);
    if let Ok(at) = find_line_at(doc, "tolerations:", p) {
        let (block, _) = take_block(doc, at);
        // Its comments stay where they were; the values carry them too.
        workload.tolerations = Some(block);
    }
    let sa = find_line(doc, &format!("serviceAccountName: ferrolb-{component}"))?;
    let with_list = |value: &str, key: &str| {
        [
            format!("{}{{{{- with {value} }}}}", pad(p)),
            format!("{}{key}:", pad(p)),
            format!("{}{{{{- toYaml . | nindent {} }}}}", pad(p + 2), p + 2),
            format!("{}{{{{- end }}}}", pad(p)),
        ]
    };
    let mut pod = Vec::new();
    pod.extend(with_list(".Values.imagePullSecrets", "imagePullSecrets"));
    pod.extend([
        format!("{}{{{{- with {values}.priorityClassName }}}}", pad(p)),
        format!("{}priorityClassName: {{{{ . }}}}", pad(p)),
        format!("{}{{{{- end }}}}", pad(p)),
    ]);
    pod.extend(with_list(&format!("{values}.tolerations"), "tolerations"));
    doc.splice(sa + 1..sa + 1, pod);

    // The speaker's timing profile.
    if component == "speaker" {
        let name = find_line(doc, "- name: FERROLB_TIMING_PROFILE")?;
        let value = doc
            .get(name + 1)
            .filter(|l| l.trim_start().starts_with("value: "))
            .context("FERROLB_TIMING_PROFILE without a `value:` on the next line")?;
        let n = indent(value);
        let profile = value.trim_start()["value: ".len()..].trim().to_owned();
        defaults.timing_profile = Some(profile);
        doc[name + 1] = format!(
            "{}value: {{{{ .Values.speaker.timingProfile | quote }}}}",
            pad(n)
        );
    }

    // The speaker's interface exclusions (issue #28 item 4): the base's value, as a list.
    if component == "speaker" {
        let name = find_line(doc, "- name: FERROLB_EXCLUDE_INTERFACES")?;
        let value = doc
            .get(name + 1)
            .filter(|l| l.trim_start().starts_with("value: "))
            .context("FERROLB_EXCLUDE_INTERFACES without a `value:` on the next line")?;
        let n = indent(value);
        let list = value.trim_start()["value: ".len()..].trim();
        defaults.exclude_interfaces = Some(list.split(',').map(str::to_owned).collect());
        doc[name + 1] = format!(
            "{}value: {{{{ join \",\" .Values.speaker.excludeInterfaces | quote }}}}",
            pad(n)
        );
    }

    // Environment: what the values set, after the base's own variables.
    let env = find_line(doc, "env:")?;
    let n = indent(&doc[env]);
    let end = block_end(doc, env);
    let item = |name: &str, value: &str| {
        [
            format!("{}- name: {name}", pad(n)),
            format!("{}  value: {value}", pad(n)),
        ]
    };
    let mut extra = Vec::new();
    extra.push(format!("{}{{{{- with .Values.lbClass }}}}", pad(n)));
    extra.extend(item("FERROLB_LB_CLASS", "{{ . | quote }}"));
    extra.push(format!("{}{{{{- end }}}}", pad(n)));
    extra.push(format!("{}{{{{- if not .Values.defaultClass }}}}", pad(n)));
    extra.extend(item("FERROLB_DEFAULT_CLASS", "\"false\""));
    extra.push(format!("{}{{{{- end }}}}", pad(n)));
    if component == "controller" {
        extra.push(format!(
            "{}{{{{- if .Values.memberlist.existingSecret }}}}",
            pad(n)
        ));
        extra.extend(item("FERROLB_CREATE_MEMBERLIST_SECRET", "\"false\""));
        extra.push(format!("{}{{{{- end }}}}", pad(n)));
    }
    if component == "speaker" {
        extra.push(format!("{}{{{{- if .Values.ignoreExcludeLb }}}}", pad(n)));
        extra.extend(item("FERROLB_EXCLUDE_LB_LABEL", "\"ignore\""));
        extra.push(format!(
            "{}{{{{- else if ne .Values.excludeLbLabel \"auto\" }}}}",
            pad(n)
        ));
        extra.extend(item(
            "FERROLB_EXCLUDE_LB_LABEL",
            "{{ .Values.excludeLbLabel | quote }}",
        ));
        extra.push(format!("{}{{{{- end }}}}", pad(n)));
        extra.push(format!("{}{{{{- if .Values.ignoreCordon }}}}", pad(n)));
        extra.extend(item("FERROLB_IGNORE_CORDON", "\"true\""));
        extra.push(format!("{}{{{{- end }}}}", pad(n)));
        extra.push(format!(
            "{}{{{{- with .Values.speaker.interfaces }}}}",
            pad(n)
        ));
        extra.extend(item("FERROLB_INTERFACES", "{{ join \",\" . | quote }}"));
        extra.push(format!("{}{{{{- end }}}}", pad(n)));
    }
    extra.push(format!("{}{{{{- with {values}.extraEnv }}}}", pad(n)));
    extra.push(format!("{}{{{{- toYaml . | nindent {n} }}}}", pad(n)));
    extra.push(format!("{}{{{{- end }}}}", pad(n)));
    doc.splice(end..end, extra);
    Ok(())
}

fn chart_yaml() -> String {
    format!(
        "# Generated by `{GENERATOR}`: version and appVersion are the workspace's crate version.
# Never edit; see docs/install.md (\"Helm\").
apiVersion: v2
name: ferrolb
description: >-
  LoadBalancer Services on bare metal: IPAM from IPAddressPools and layer-2 (ARP/NDP)
  announcements with sub-second failover; MetalLB's layer-2 mode rebuilt in Rust.
type: application
version: {CHART_VERSION}
appVersion: \"{CHART_VERSION}\"
keywords:
- loadbalancer
- bare-metal
- arp
- ndp
- metallb
"
    )
}

/// A block from the base under `key:` at indentation 2 of values.yaml, its comments above it.
fn values_block(key: &str, block: Option<&Block>, empty: &str) -> anyhow::Result<String> {
    let Some(block) = block else {
        return Ok(format!("  {key}: {empty}\n"));
    };
    let reindent = |line: &str| -> anyhow::Result<String> {
        if line.trim().is_empty() {
            return Ok(String::new());
        }
        let n = indent(line);
        ensure!(
            n >= block.indent,
            "a line of `{key}` left of its key: {line}"
        );
        Ok(format!("  {}", &line[block.indent..]))
    };
    let mut out = String::new();
    for line in &block.comments {
        out.push_str(&reindent(line)?);
        out.push('\n');
    }
    out.push_str(&format!("  {key}:\n"));
    for line in &block.lines {
        out.push_str(&reindent(line)?);
        out.push('\n');
    }
    Ok(out)
}

fn values_yaml(base: &Base, repository: &str, d: &Defaults) -> anyhow::Result<String> {
    let pull_policy = d
        .pull_policy
        .as_deref()
        .context("no imagePullPolicy in the workloads")?;
    let timing_profile = d
        .timing_profile
        .as_deref()
        .context("no speaker timing profile")?;
    let exclude_interfaces = d
        .exclude_interfaces
        .as_ref()
        .context("no speaker FERROLB_EXCLUDE_INTERFACES")?
        .join(", ");
    let namespace = &base.namespace;
    let secret = &base.memberlist_secret;
    let controller_resources = values_block("resources", d.controller.resources.as_ref(), "{}")?;
    let controller_tolerations =
        values_block("tolerations", d.controller.tolerations.as_ref(), "[]")?;
    let speaker_resources = values_block("resources", d.speaker.resources.as_ref(), "{}")?;
    let speaker_tolerations = values_block("tolerations", d.speaker.tolerations.as_ref(), "[]")?;
    Ok(format!(
        "# Values of the ferrolb chart, with their defaults. Generated by `{GENERATOR}`
# from the kustomize base deploy/ (the defaults the base has are read from it); never edit. Every
# value is described in docs/install.md, \"Helm\".

# The namespace of every namespaced object. Empty: the release namespace, so
#   helm install ferrolb deploy/helm/ferrolb -n {namespace} --create-namespace
# (what `kubectl apply -k deploy/` uses). The chart does not create the namespace by default: Helm
# refuses to install over a Namespace object it did not make, so a chart that templates one fails
# with --create-namespace. The speaker needs hostNetwork and CAP_NET_RAW, which the Pod Security
# levels \"baseline\" and \"restricted\" forbid: where the cluster enforces one of them by default,
# label the namespace pod-security.kubernetes.io/enforce=privileged (docs/install.md, \"Helm\").
# create: true makes the chart create namespace.name itself, labelled \"privileged\", as the
# kustomize base does; then name it (e.g. {namespace}) and install the release into another,
# existing namespace (e.g. default).
namespace:
  name: \"\"
  create: false

# The CRDs (ipaddresspools, l2advertisements, l2announcements.ferrolb.io) are templates, so
# `helm upgrade` updates them. keep: `helm uninstall` leaves them, and every IPAddressPool and
# L2Advertisement, in place (helm.sh/resource-policy: keep).
crds:
  create: true
  keep: true

# One image holds both binaries (Containerfile). The tag defaults to the chart's appVersion
# ({CHART_VERSION}); the chart never uses `latest`. IfNotPresent: an image loaded into the nodes
# (`minikube image load`, `kind load docker-image`) is used without a registry.
image:
  repository: {repository}
  tag: \"\"
  pullPolicy: {pull_policy}
# e.g. [{{name: my-registry-credentials}}], for both workloads.
imagePullSecrets: []

# The spec.loadBalancerClass served (FERROLB_LB_CLASS, on controller and speakers alike).
# Empty: the binaries' default, ferrolb.io/l2.
lbClass: \"\"
# Also serve Services without a loadBalancerClass (FERROLB_DEFAULT_CLASS).
defaultClass: true
# When the label node.kubernetes.io/exclude-from-external-load-balancers keeps a Node from
# announcing (FERROLB_EXCLUDE_LB_LABEL): auto (honoured unless every Node carries it, as the only
# node of a minikube or kind cluster does; then set aside, with a Warning Event
# ExclusionLabelIgnored on each Service), honour (always, as MetalLB) or ignore (never).
excludeLbLabel: auto
# Deprecated: true is excludeLbLabel=ignore.
ignoreExcludeLb: false
# Speakers keep announcing from cordoned Nodes (FERROLB_IGNORE_CORDON). Off (the default): a
# cordoned Node's IPs move to an uncordoned one, break before make, and come back on uncordon;
# when every eligible Node is cordoned they stay (docs/operations.md, \"Cordon and drain\").
ignoreCordon: false

# The speakers' membership key (docs/install.md, \"The membership key\").
memberlist:
  # Empty: the controller creates the Secret {secret} with a random key (32 bytes from the OS,
  # 64 hex digits) when it is absent and never replaces it; the chart renders no key, so
  # `helm template` (Argo CD, Flux) gives the same objects on every sync. `ferrolb uninstall`
  # deletes it. Otherwise (the GitOps path for a key of your own, e.g. from Sealed Secrets or
  # External Secrets): the name of a Secret you create in the namespace, holding the key under
  # `key`; the controller then creates nothing, and the speakers wait, not ready, until it exists.
  existingSecret: \"\"

# The controller Deployment.
controller:
{controller_resources}{controller_tolerations}  priorityClassName: \"\"
  # More environment, e.g. [{{name: FERROLB_LOG_FORMAT, value: json}}] (`ferrolb-controller --help`).
  extraEnv: []

# The speaker DaemonSet.
speaker:
  # FERROLB_TIMING_PROFILE: fast or safe (nodes at their CPU limits; docs/speaker.md). Every speaker
  # of a cluster must use the same profile.
  timingProfile: {timing_profile}
  # The default announce interfaces (FERROLB_INTERFACES), e.g. [eth1] or [bond0]: addresses whose
  # L2Advertisements name no `spec.interfaces` are announced on exactly these, as given. Empty:
  # every interface that is up, can broadcast and is not virtual, one per segment (docs/speaker.md).
  # An L2Advertisement's own `spec.interfaces` still wins (docs/configuration.md).
  interfaces: []
  # Interface names the automatic set leaves out (FERROLB_EXCLUDE_INTERFACES): `default` is the
  # built-in list (veth*, docker*, cni*, cali*, flannel*, cilium*, kube-ipvs*, lxc*, virbr*, dummy*,
  # tunl*, nodelocaldns*); a pattern's `*` is any run of characters. [default, br-*] extends the
  # list, [veth*, docker*] replaces it, [none] excludes nothing (docs/configuration.md).
  excludeInterfaces: [{exclude_interfaces}]
{speaker_resources}{speaker_tolerations}  # The speakers carry the Services' traffic to their node: never preempted for ordinary Pods.
  priorityClassName: system-node-critical
  # More environment, e.g. [{{name: FERROLB_LOG_FORMAT, value: json}}] (`ferrolb-speaker --help`).
  extraEnv: []

# A Prometheus Operator ServiceMonitor scraping /metrics of the controller (7472) and of every
# speaker (7473), through two headless Services it adds. Needs the monitoring.coreos.com CRDs.
serviceMonitor:
  enabled: false
  # Scrape interval; empty: Prometheus' default.
  interval: \"\"
  # Extra labels, e.g. the ones your Prometheus' serviceMonitorSelector matches.
  labels: {{}}
"
    ))
}

/// Compares the committed chart with what [`generate`] produces; the differences, one line
/// each (a stale, missing or unknown file). Empty when fresh.
///
/// # Errors
/// [`generate`] failed, or the chart directory cannot be listed.
pub fn stale_files(root: &Path) -> anyhow::Result<Vec<String>> {
    let chart = root.join(CHART_DIR);
    let generated: BTreeMap<PathBuf, String> = generate(root)?.into_iter().collect();
    let mut problems = Vec::new();
    for (path, text) in &generated {
        match std::fs::read_to_string(chart.join(path)) {
            Ok(committed) if committed == *text => {}
            Ok(_) => problems.push(format!("{} is stale", path.display())),
            Err(_) => problems.push(format!("{} is missing", path.display())),
        }
    }
    let mut stack = vec![chart.clone()];
    while let Some(dir) = stack.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path.strip_prefix(&chart)?.to_path_buf();
            let hand_written = HAND_WRITTEN.iter().any(|h| Path::new(h) == rel);
            if !hand_written && !generated.contains_key(&rel) {
                problems.push(format!(
                    "{} is neither generated nor listed in HAND_WRITTEN (tests/src/chart.rs)",
                    rel.display()
                ));
            }
        }
    }
    Ok(problems)
}
