//! The deployment files under `deploy/`: every Kubernetes manifest and the compose
//! file parse, and they reference each other consistently (names, ports, labels,
//! secret keys, volumes, memory against `--mem`). Nothing here needs a cluster or
//! a Docker engine; `deploy/smoke.sh` runs the compose cluster for real.

use crate::common::repo;
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

// ---------------------------------------------------------------- helpers

/// Every YAML document of a file, as JSON values (merge keys `<<:` applied).
fn documents(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let mut v = serde_yaml_ng::Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        v.apply_merge().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if v.is_null() {
            continue; // an empty document (a trailing `---`)
        }
        docs.push(serde_json::to_value(&v).unwrap_or_else(|e| panic!("{}: {e}", path.display())));
    }
    docs
}

fn s<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str().unwrap_or_else(|| panic!("{what}: expected a string, found {v}"))
}

fn list<'a>(v: &'a Value, what: &str) -> &'a Vec<Value> {
    v.as_array().unwrap_or_else(|| panic!("{what}: expected a list, found {v}"))
}

/// The value of a command-line flag in an argument list: `--flag=value` or
/// `--flag value`.
fn flag(args: &[String], name: &str) -> Option<String> {
    let eq = format!("{name}=");
    for (i, a) in args.iter().enumerate() {
        if let Some(v) = a.strip_prefix(&eq) {
            return Some(v.to_string());
        }
        if a == name {
            return args.get(i + 1).cloned();
        }
    }
    None
}

fn strings(v: &Value, what: &str) -> Vec<String> {
    list(v, what).iter().map(|a| s(a, what).to_string()).collect()
}

/// `host:port` split at the last colon.
fn host_port(addr: &str) -> (&str, u16) {
    let (h, p) = addr.rsplit_once(':').unwrap_or_else(|| panic!("{addr:?}: expected host:port"));
    (h, p.parse().unwrap_or_else(|_| panic!("{addr:?}: bad port")))
}

/// A size as `sokoshard worker --mem` reads it: a number with an optional
/// binary unit (k, m, g, t, with or without b / ib), case-insensitive. Compose's
/// `mem_limit` uses the same units.
fn cli_size(text: &str) -> u64 {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().unwrap_or_else(|_| panic!("size {text:?}"));
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        u => panic!("size {text:?}: unit {u:?}"),
    };
    (v * mult as f64) as u64
}

/// A Kubernetes memory quantity: `5Gi`, `512Mi`, `1G` (decimal), `1e9`, `1000`.
fn k8s_bytes(q: &str) -> u64 {
    let units: [(&str, f64); 12] = [
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    for (u, m) in units {
        if let Some(n) = q.strip_suffix(u) {
            return (n.parse::<f64>().unwrap_or_else(|_| panic!("quantity {q:?}")) * m) as u64;
        }
    }
    assert!(!q.ends_with('m'), "memory quantity {q:?} in millibytes");
    q.parse::<f64>().unwrap_or_else(|_| panic!("quantity {q:?}")) as u64
}

#[test]
fn size_parsers_read_the_units_they_should() {
    assert_eq!(cli_size("4G"), 4 << 30);
    assert_eq!(cli_size("512M"), 512 << 20);
    assert_eq!(cli_size("1.5GiB"), 3 << 29);
    assert_eq!(cli_size("1536m"), 1536 << 20);
    assert_eq!(k8s_bytes("5Gi"), 5 << 30);
    assert_eq!(k8s_bytes("512Mi"), 512 << 20);
    assert_eq!(k8s_bytes("2G"), 2_000_000_000);
    assert_eq!(k8s_bytes("1e9"), 1_000_000_000);
    assert_eq!(k8s_bytes("1048576"), 1 << 20);
    assert_eq!(flag(&["a".into(), "--mem=4G".into()], "--mem").as_deref(), Some("4G"));
    assert_eq!(flag(&["--mem".into(), "4G".into()], "--mem").as_deref(), Some("4G"));
    assert_eq!(flag(&["--memory=1".into()], "--mem"), None);
}

// ---------------------------------------------------------------- Kubernetes

struct Manifests {
    /// (file name, document)
    docs: Vec<(String, Value)>,
}

impl Manifests {
    fn load() -> Self {
        let dir = repo("deploy/kubernetes");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "no manifests in {}", dir.display());
        let mut docs = Vec::new();
        for f in files {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            let these = documents(&f);
            assert!(!these.is_empty(), "{name}: no documents");
            for d in these {
                docs.push((name.clone(), d));
            }
        }
        Manifests { docs }
    }

    fn objects(&self) -> impl Iterator<Item = &Value> {
        self.docs.iter().map(|(_, d)| d).filter(|d| d["kind"] != "Kustomization")
    }

    fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects().filter(move |d| d["kind"] == kind)
    }

    fn named(&self, kind: &str, name: &str) -> &Value {
        let found: Vec<&Value> =
            self.objects().filter(|d| d["kind"] == kind && d["metadata"]["name"] == name).collect();
        assert_eq!(found.len(), 1, "expected one {kind} named {name:?}, found {}", found.len());
        found[0]
    }

    /// Every (kind, name, pod spec) of the workloads.
    fn pod_specs(&self) -> Vec<(&str, &str, &Value)> {
        self.objects()
            .filter(|d| matches!(d["kind"].as_str(), Some("Deployment" | "StatefulSet" | "Job")))
            .map(|d| (s(&d["kind"], "kind"), s(&d["metadata"]["name"], "name"), &d["spec"]["template"]["spec"]))
            .collect()
    }
}

fn labels(v: &Value) -> BTreeMap<String, String> {
    v.as_object().map(|m| m.iter().map(|(k, v)| (k.clone(), s(v, k).to_string())).collect()).unwrap_or_default()
}

/// Does a selector (label map) pick pods with these labels?
fn selects(selector: &BTreeMap<String, String>, pod: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| pod.get(k) == Some(v))
}

/// The one container of a pod spec whose program arguments start with `command`
/// (`coordinator`, `worker`, `submit`).
fn container<'a>(pod: &'a Value, what: &str) -> &'a Value {
    let cs = list(&pod["containers"], "containers");
    assert_eq!(cs.len(), 1, "{what}: one container expected");
    &cs[0]
}

fn args_of(c: &Value) -> Vec<String> {
    strings(&c["args"], "args")
}

/// The port a container serves on, from `--listen`, checked against its
/// declared containerPort; returns (port, port name).
fn served_port(c: &Value, what: &str) -> (u16, String) {
    let args = args_of(c);
    let listen = flag(&args, "--listen").unwrap_or_else(|| panic!("{what}: no --listen"));
    let (_, port) = host_port(&listen);
    let ports = list(&c["ports"], "ports");
    let decl = ports
        .iter()
        .find(|p| p["containerPort"].as_u64() == Some(port as u64))
        .unwrap_or_else(|| panic!("{what}: --listen port {port} is not a containerPort"));
    (port, s(&decl["name"], "port name").to_string())
}

/// Resolves a Service's targetPort (a number or a port name) against a container.
fn target_port(c: &Value, target: &Value) -> Option<u64> {
    let ports = c["ports"].as_array()?;
    match target {
        Value::Number(n) => {
            ports.iter().find(|p| p["containerPort"].as_u64() == n.as_u64()).and_then(|p| p["containerPort"].as_u64())
        }
        Value::String(name) => {
            ports.iter().find(|p| p["name"] == name.as_str()).and_then(|p| p["containerPort"].as_u64())
        }
        _ => None,
    }
}

/// The address a container's probes dial (`sokoshard health [--worker] ADDR`).
fn probe_ports(c: &Value) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for probe in ["readinessProbe", "livenessProbe", "startupProbe"] {
        if c[probe].is_null() {
            continue;
        }
        let cmd = strings(&c[probe]["exec"]["command"], probe);
        assert!(cmd[0].ends_with("sokoshard") && cmd[1] == "health", "{probe}: {cmd:?} is not `sokoshard health`");
        let (_, port) = host_port(cmd.last().unwrap());
        out.push((probe.to_string(), port));
    }
    out
}

#[test]
fn kubernetes_manifests_parse_and_have_the_expected_objects() {
    let m = Manifests::load();
    let mut seen = BTreeSet::new();
    for (file, d) in &m.docs {
        let kind = s(&d["kind"], file);
        assert!(d["apiVersion"].is_string(), "{file}: a {kind} has no apiVersion");
        if kind != "Kustomization" {
            let name = s(&d["metadata"]["name"], file).to_string();
            assert!(seen.insert((kind.to_string(), name.clone())), "{file}: {kind} {name} is defined twice");
            assert_eq!(
                d["metadata"]["labels"]["app.kubernetes.io/name"], "sokoshard",
                "{file}: {kind} {name} lacks the app label"
            );
            assert!(d["metadata"]["namespace"].is_null(), "{file}: {kind} {name} pins a namespace");
        }
    }
    for kind in ["StatefulSet", "Service", "Deployment", "Secret", "Job", "ConfigMap", "PersistentVolumeClaim"] {
        assert!(m.of_kind(kind).next().is_some(), "no {kind} in deploy/kubernetes");
    }
    // one image for every container
    let images: BTreeSet<_> =
        m.pod_specs().iter().map(|(_, n, p)| s(&container(p, n)["image"], "image").to_string()).collect();
    assert_eq!(images.len(), 1, "containers use different images: {images:?}");
    // the images run as the user that owns /data in the image
    for (kind, name, pod) in m.pod_specs() {
        assert_eq!(pod["securityContext"]["runAsUser"], 10001, "{kind} {name}");
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{kind} {name}");
        // servers: SIGTERM must reach a process that is not PID 1
        if kind != "Job" {
            assert_eq!(
                pod["shareProcessNamespace"], true,
                "{kind} {name}: sokoshard would be PID 1 and ignore SIGTERM"
            );
        }
    }
}

/// The pod template's Prometheus annotations name the port the container
/// serves `/metrics` on (the `flag`'s port), and the container declares it.
fn scraped_at(template: &Value, c: &Value, args: &[String], flag_name: &str) {
    let (_, port) = host_port(&flag(args, flag_name).unwrap_or_else(|| panic!("no {flag_name}")));
    let ann = &template["metadata"]["annotations"];
    assert_eq!(ann["prometheus.io/scrape"], "true");
    assert_eq!(ann["prometheus.io/port"].as_str(), Some(port.to_string().as_str()));
    assert_eq!(ann["prometheus.io/path"], "/metrics");
    assert!(list(&c["ports"], "ports").iter().any(|p| p["containerPort"].as_u64() == Some(port as u64)));
}

#[test]
fn workers_are_a_statefulset_behind_a_headless_service_with_a_volume_each() {
    let m = Manifests::load();
    let sets: Vec<_> = m.of_kind("StatefulSet").collect();
    assert_eq!(sets.len(), 1);
    let sts = sets[0];
    let name = s(&sts["metadata"]["name"], "statefulset name");
    let spec = &sts["spec"];
    assert!(spec["replicas"].as_u64().unwrap() >= 1);
    let pod_labels = labels(&spec["template"]["metadata"]["labels"]);
    assert!(
        selects(&labels(&spec["selector"]["matchLabels"]), &pod_labels),
        "the StatefulSet's selector misses its pods"
    );

    // the headless Service the StatefulSet names gives the pods stable DNS names
    let svc_name = s(&spec["serviceName"], "serviceName");
    let svc = m.named("Service", svc_name);
    assert_eq!(svc["spec"]["clusterIP"], "None", "Service {svc_name} must be headless");
    assert_eq!(svc["spec"]["publishNotReadyAddresses"], true, "workers must resolve each other before they are Ready");
    assert!(selects(&labels(&svc["spec"]["selector"]), &pod_labels), "Service {svc_name} does not select the workers");

    let c = container(&spec["template"]["spec"], name);
    let args = args_of(c);
    assert_eq!(args[0], "worker");
    scraped_at(&spec["template"], c, &args, "--metrics");
    let (port, port_name) = served_port(c, name);
    for p in list(&svc["spec"]["ports"], "ports") {
        assert_eq!(
            target_port(c, &p["targetPort"]),
            Some(port as u64),
            "Service {svc_name}: targetPort {} is not the worker's port",
            p["targetPort"]
        );
        assert_eq!(p["port"].as_u64(), Some(port as u64), "the headless Service's port is the one workers advertise");
    }
    assert!(!port_name.is_empty());
    for (probe, p) in probe_ports(c) {
        assert_eq!(p, port, "{probe} dials another port than --listen");
        let cmd = strings(&c[probe.as_str()]["exec"]["command"], &probe);
        assert!(cmd.contains(&"--worker".to_string()), "{probe}: a worker is probed with `health --worker`");
    }

    // --advertise: the pod's own stable name under the headless Service
    let adv = flag(&args, "--advertise").expect("workers advertise their stable name");
    let (host, adv_port) = host_port(&adv);
    assert_eq!(adv_port, port);
    assert!(
        host.starts_with(&format!("$(POD_NAME).{svc_name}.")) || host == format!("$(POD_NAME).{svc_name}"),
        "--advertise {adv:?} is not <pod>.{svc_name}"
    );
    let env = list(&c["env"], "env");
    for var in ["POD_NAME", "POD_NAMESPACE"] {
        if adv.contains(&format!("$({var})")) {
            let e = env
                .iter()
                .find(|e| e["name"] == var)
                .unwrap_or_else(|| panic!("--advertise uses $({var}), which is not set"));
            assert!(e["valueFrom"]["fieldRef"]["fieldPath"].is_string(), "{var} comes from the downward API");
            // Kubernetes expands $(VAR) only for variables defined before use
        }
    }

    // one persistent volume per worker, mounted at --data-dir
    let data_dir = flag(&args, "--data-dir").expect("--data-dir");
    let claims = list(&spec["volumeClaimTemplates"], "volumeClaimTemplates");
    assert_eq!(claims.len(), 1);
    let claim = s(&claims[0]["metadata"]["name"], "claim name");
    let storage = k8s_bytes(s(&claims[0]["spec"]["resources"]["requests"]["storage"], "storage"));
    let mounts = list(&c["volumeMounts"], "volumeMounts");
    assert!(
        mounts.iter().any(|v| v["name"] == claim && v["mountPath"] == data_dir.as_str()),
        "the claim {claim:?} is not mounted at --data-dir {data_dir}"
    );
    assert!(
        spec["template"]["spec"]["volumes"].is_null(),
        "the data dir must come from the claim template, not a pod volume"
    );

    // memory: the request and the limit hold the --mem budget; disk holds twice it
    let mem = cli_size(&flag(&args, "--mem").expect("workers set --mem"));
    let res = &c["resources"];
    let limit = k8s_bytes(s(&res["limits"]["memory"], "memory limit"));
    let request = k8s_bytes(s(&res["requests"]["memory"], "memory request"));
    assert!(limit >= mem && request >= mem, "memory request {request} / limit {limit} below --mem {mem}");
    assert!(limit >= request);
    assert!(limit >= mem + (256 << 20), "the limit leaves no room beside the --mem budget");
    assert!(storage >= 2 * mem, "the data volume ({storage} bytes) is under twice --mem ({mem})");
    // --threads matches the CPU request
    if let Some(t) = flag(&args, "--threads") {
        let cpu = s(&res["requests"]["cpu"], "cpu request");
        let cpus: f64 =
            cpu.strip_suffix('m').map_or_else(|| cpu.parse().unwrap(), |m| m.parse::<f64>().unwrap() / 1000.0);
        assert_eq!(t.parse::<f64>().unwrap(), cpus, "--threads {t} against a CPU request of {cpu}");
    }
}

#[test]
fn the_coordinator_is_a_deployment_with_a_service_and_workers_join_it() {
    let m = Manifests::load();
    let deps: Vec<_> = m.of_kind("Deployment").collect();
    assert_eq!(deps.len(), 1);
    let dep = deps[0];
    let name = s(&dep["metadata"]["name"], "deployment name");
    assert_eq!(dep["spec"]["replicas"], 1, "exactly one coordinator");
    assert_eq!(dep["spec"]["strategy"]["type"], "Recreate", "two coordinators must never share the job log");
    let pod_labels = labels(&dep["spec"]["template"]["metadata"]["labels"]);
    assert!(selects(&labels(&dep["spec"]["selector"]["matchLabels"]), &pod_labels));
    let pod = &dep["spec"]["template"]["spec"];
    let c = container(pod, name);
    let args = args_of(c);
    assert_eq!(args[0], "coordinator");
    scraped_at(&dep["spec"]["template"], c, &args, "--http");
    let (port, _) = served_port(c, name);
    for (probe, p) in probe_ports(c) {
        assert_eq!(p, port, "{probe} dials another port than --listen");
    }

    // the Service that selects the coordinator (and nothing else)
    let sts = m.of_kind("StatefulSet").next().unwrap();
    let worker_labels = labels(&sts["spec"]["template"]["metadata"]["labels"]);
    let svcs: Vec<_> =
        m.of_kind("Service").filter(|sv| selects(&labels(&sv["spec"]["selector"]), &pod_labels)).collect();
    assert_eq!(svcs.len(), 1, "one Service selects the coordinator");
    let svc = svcs[0];
    let svc_name = s(&svc["metadata"]["name"], "service name");
    assert!(!selects(&labels(&svc["spec"]["selector"]), &worker_labels), "Service {svc_name} also selects workers");
    assert_ne!(svc["spec"]["clusterIP"], "None");
    let svc_ports = list(&svc["spec"]["ports"], "ports");
    assert_eq!(svc_ports.len(), 1);
    assert_eq!(
        target_port(c, &svc_ports[0]["targetPort"]),
        Some(port as u64),
        "Service {svc_name} targets another port"
    );
    let svc_port = svc_ports[0]["port"].as_u64().unwrap() as u16;

    // the data dir is on a claim defined here
    let data_dir = flag(&args, "--data-dir").expect("--data-dir");
    let mount = list(&c["volumeMounts"], "volumeMounts")
        .iter()
        .find(|v| v["mountPath"] == data_dir.as_str())
        .expect("--data-dir is mounted");
    let vol = list(&pod["volumes"], "volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mounted volume is declared");
    m.named("PersistentVolumeClaim", s(&vol["persistentVolumeClaim"]["claimName"], "claimName"));

    // workers join through that Service
    let wargs = args_of(container(&sts["spec"]["template"]["spec"], "workers"));
    let join = flag(&wargs, "--join").expect("--join");
    assert_eq!(host_port(&join), (svc_name, svc_port), "workers join {join}, not the coordinator Service");
    // --min-workers is no more than the workers there are
    if let Some(n) = flag(&args, "--min-workers") {
        assert!(n.parse::<u64>().unwrap() <= sts["spec"]["replicas"].as_u64().unwrap());
    }
}

#[test]
fn the_token_secret_is_referenced_by_name_and_key_everywhere() {
    let m = Manifests::load();
    let mut refs = 0;
    for (kind, name, pod) in m.pod_specs() {
        let c = container(pod, name);
        let token = list(&c["env"], "env")
            .iter()
            .find(|e| e["name"] == "SOKOSHARD_TOKEN")
            .unwrap_or_else(|| panic!("{kind} {name}: no SOKOSHARD_TOKEN"));
        assert!(token["value"].is_null(), "{kind} {name}: the token must come from the Secret, not a literal");
        for e in list(&c["env"], "env") {
            let r = &e["valueFrom"]["secretKeyRef"];
            if r.is_null() {
                continue;
            }
            refs += 1;
            let secret = m.named("Secret", s(&r["name"], "secret name"));
            let key = s(&r["key"], "secret key");
            assert!(
                !secret["stringData"][key].is_null() || !secret["data"][key].is_null(),
                "{kind} {name}: Secret {} has no key {key:?}",
                r["name"]
            );
        }
    }
    assert!(refs >= 3, "coordinator, workers and the Job all take the token from the Secret");
}

#[test]
fn the_job_submits_a_level_to_the_coordinator_service() {
    let m = Manifests::load();
    let jobs: Vec<_> = m.of_kind("Job").collect();
    assert_eq!(jobs.len(), 1);
    let job = jobs[0];
    let name = s(&job["metadata"]["name"], "job name");
    let pod = &job["spec"]["template"]["spec"];
    assert!(matches!(pod["restartPolicy"].as_str(), Some("Never" | "OnFailure")));
    let c = container(pod, name);
    let args = args_of(c);
    assert_eq!(args[0], "submit");

    let dep = m.of_kind("Deployment").next().unwrap();
    let coord_labels = labels(&dep["spec"]["template"]["metadata"]["labels"]);
    let svc = m.of_kind("Service").find(|sv| selects(&labels(&sv["spec"]["selector"]), &coord_labels)).unwrap();
    let addr = flag(&args, "--coordinator").expect("--coordinator");
    let svc_port = svc["spec"]["ports"][0]["port"].as_u64().unwrap() as u16;
    assert_eq!(host_port(&addr), (s(&svc["metadata"]["name"], "name"), svc_port), "the Job dials {addr}");

    // the level file: a key of a ConfigMap mounted in the pod, or a shipped one
    let file = args
        .iter()
        .skip(1)
        .find(|a| !a.starts_with("--") && !a.chars().all(|c| c.is_ascii_digit()) && a.contains('/'))
        .expect("a level file");
    if let Some(rest) = file.strip_prefix("/usr/share/sokoshard/") {
        assert!(repo("levels").join(rest).exists(), "{file} is not a shipped collection");
    } else {
        let (dir, key) = file.rsplit_once('/').unwrap();
        let mount = list(&c["volumeMounts"], "volumeMounts")
            .iter()
            .find(|v| v["mountPath"] == dir)
            .expect("the level's directory is mounted");
        let vol = list(&pod["volumes"], "volumes")
            .iter()
            .find(|v| v["name"] == mount["name"])
            .expect("the mounted volume is declared");
        let cm = m.named("ConfigMap", s(&vol["configMap"]["name"], "configMap name"));
        let text = s(&cm["data"][key], key);
        // the level in the ConfigMap is a level sokoshard reads
        let levels = sokoshard::model::level::split_collection(text, key);
        assert!(!levels.is_empty(), "ConfigMap key {key} holds no level");
        let n: usize = flag(&args, "--level").expect("--level").parse().unwrap();
        let t = levels.get(n - 1).expect("--level within the ConfigMap's collection");
        let level = t.parse().expect("the ConfigMap's level parses");
        assert!(level.box_count() > 0);
    }
}

#[test]
fn kustomization_lists_the_coordinator_and_workers_but_not_the_secret_or_job() {
    let m = Manifests::load();
    let k: Vec<_> = m.docs.iter().filter(|(_, d)| d["kind"] == "Kustomization").collect();
    assert_eq!(k.len(), 1);
    let listed: BTreeSet<String> = strings(&k[0].1["resources"], "resources").into_iter().collect();
    let files: BTreeSet<String> = m.docs.iter().map(|(f, _)| f.clone()).collect();
    for f in &listed {
        assert!(files.contains(f), "kustomization lists {f}, which is not there");
    }
    for (f, d) in &m.docs {
        let kind = d["kind"].as_str().unwrap();
        if kind == "Kustomization" {
            continue;
        }
        // a Job is created once per submission, not kept applied; the Secret is
        // created by hand, so that apply never overwrites a real token
        let by_hand = m.docs.iter().any(|(g, e)| g == f && (e["kind"] == "Job" || e["kind"] == "Secret"));
        assert_eq!(
            listed.contains(f),
            !by_hand,
            "{f} ({kind}) {} the kustomization",
            if by_hand { "is in" } else { "is missing from" }
        );
    }
}

// ---------------------------------------------------------------- compose

/// Resolves `${VAR:-default}` and `${VAR-default}` to their defaults, as compose
/// does with nothing set.
fn compose_defaults(v: &str) -> String {
    let mut out = String::new();
    let mut rest = v;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let end = rest[i..].find('}').expect("closing brace") + i;
        let inner = &rest[i + 2..end];
        let default = inner.split_once(":-").or_else(|| inner.split_once('-')).map_or("", |(_, d)| d);
        out.push_str(default);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

#[test]
fn compose_runs_a_coordinator_and_three_workers_with_own_volumes_and_health_checks() {
    let path = repo("deploy/docker-compose.yml");
    let docs = documents(&path);
    assert_eq!(docs.len(), 1);
    let c = &docs[0];
    let services = c["services"].as_object().expect("services");
    let args = |svc: &Value| strings(&svc["command"], "command");
    let (coords, workers): (Vec<_>, Vec<_>) = services.iter().partition(|(_, v)| args(v)[0] == "coordinator");
    assert_eq!(coords.len(), 1, "one coordinator");
    assert!(workers.iter().all(|(_, v)| args(v)[0] == "worker"), "only coordinator and worker services");
    assert_eq!(workers.len(), 3, "three workers");
    let (coord_name, coord) = coords[0];
    let cargs = args(coord);
    let (_, coord_port) = host_port(&flag(&cargs, "--listen").unwrap());
    assert!(cargs.iter().any(|a| a.starts_with("--data-dir")));
    // the coordinator is published (on loopback by default) at its --listen
    // port, and its status page and metrics at its --http port
    let (_, http_port) = host_port(&flag(&cargs, "--http").expect("the coordinator serves --http"));
    let ports = strings(&coord["ports"], "ports");
    assert_eq!(ports.len(), 2);
    for (published, port) in ports.iter().map(|p| compose_defaults(p)).zip([coord_port, http_port]) {
        assert!(published.starts_with("127.0.0.1:"), "publish on loopback by default, not {published}");
        assert!(published.ends_with(&format!(":{port}")), "{published} is not port {port}");
    }
    // Prometheus labels name the ports the nodes serve metrics on
    let scrape_port = |v: &Value| v["labels"]["prometheus.io/port"].as_str().map(|p| p.parse::<u16>().unwrap());
    assert_eq!(scrape_port(coord), Some(http_port));
    for (name, w) in &workers {
        let (_, m) = host_port(&flag(&args(w), "--metrics").unwrap_or_else(|| panic!("{name}: --metrics")));
        assert_eq!(scrape_port(w), Some(m), "{name}");
    }

    let declared: BTreeSet<&String> = c["volumes"].as_object().expect("top-level volumes").keys().collect();
    let env_files: BTreeSet<String> =
        services.values().map(|v| compose_defaults(s(&v["env_file"], "env_file"))).collect();
    assert_eq!(env_files.len(), 1, "every service reads the token from the same env file");
    let networks: BTreeSet<String> = services.values().map(|v| strings(&v["networks"], "networks").join(",")).collect();
    assert_eq!(networks.len(), 1, "one private network for all");
    let images: BTreeSet<String> = services.values().map(|v| compose_defaults(s(&v["image"], "image"))).collect();
    assert_eq!(images.len(), 1);

    // the example env file sets the token the nodes read
    let example = std::fs::read_to_string(repo("deploy/cluster.env.example")).unwrap();
    assert!(example.lines().any(|l| l.starts_with("SOKOSHARD_TOKEN=") && l.len() > "SOKOSHARD_TOKEN=".len()));
    let gitignore = std::fs::read_to_string(repo(".gitignore")).unwrap();
    assert!(
        gitignore.lines().any(|l| l.trim() == format!("/deploy/{}", env_files.iter().next().unwrap())),
        "the real env file is not ignored by git"
    );

    let mut volumes = BTreeSet::new();
    for (name, svc) in services {
        let a = args(svc);
        let (_, port) = host_port(&flag(&a, "--listen").unwrap_or_else(|| panic!("{name}: --listen")));
        // health check: `sokoshard health` on the port the service listens on
        let test = strings(&svc["healthcheck"]["test"], "healthcheck");
        assert_eq!(test[0], "CMD", "{name}: the image has no shell");
        assert!(test[1].ends_with("sokoshard") && test[2] == "health", "{name}: {test:?}");
        assert_eq!(host_port(test.last().unwrap()).1, port, "{name}: the health check dials another port");
        assert_eq!(
            test.contains(&"--worker".to_string()),
            a[0] == "worker",
            "{name}: `health --worker` exactly for workers"
        );
        // its own named volume at --data-dir
        let dir = flag(&a, "--data-dir").unwrap_or_else(|| panic!("{name}: --data-dir"));
        let vols = strings(&svc["volumes"], "volumes");
        let vol = vols
            .iter()
            .find_map(|v| v.strip_suffix(&format!(":{dir}")))
            .unwrap_or_else(|| panic!("{name}: nothing mounted at {dir}"));
        assert!(declared.contains(&vol.to_string()), "{name}: volume {vol} is not a named volume");
        assert!(volumes.insert(vol.to_string()), "{name} shares volume {vol}");
        assert!(!svc["restart"].is_null(), "{name}: no restart policy");
        assert_eq!(svc["init"], true, "{name}: sokoshard would be PID 1 and ignore SIGTERM");
        if a[0] == "worker" {
            assert_eq!(flag(&a, "--join"), Some(format!("{coord_name}:{coord_port}")), "{name} joins elsewhere");
            assert_eq!(
                flag(&a, "--advertise"),
                Some(format!("{name}:{port}")),
                "{name} must advertise its service name"
            );
            assert_eq!(svc["depends_on"][coord_name.as_str()]["condition"], "service_healthy");
            let mem = cli_size(&flag(&a, "--mem").unwrap_or_else(|| panic!("{name}: --mem")));
            let limit = cli_size(s(&svc["mem_limit"], "mem_limit"));
            assert!(limit >= mem + (256 << 20), "{name}: mem_limit {limit} leaves no room beside --mem {mem}");
        }
    }
}

// ---------------------------------------------------------------- health

/// Child processes killed when dropped.
struct Nodes(Vec<std::process::Child>);

impl Drop for Nodes {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn health(args: &[&str], token: Option<&str>) -> std::process::Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sokoshard"));
    cmd.arg("health").args(args).env_remove("SOKOSHARD_TOKEN");
    if let Some(t) = token {
        cmd.env("SOKOSHARD_TOKEN", t);
    }
    cmd.output().expect("run sokoshard health")
}

/// `sokoshard health`, which the compose health checks and the Kubernetes probes
/// run: 0 for a live node of the named kind, 1 for a dead one, the wrong kind or
/// a wrong token, 2 without a token.
#[test]
fn health_tells_live_nodes_from_dead_ones() {
    let dir = tempfile::tempdir().unwrap();
    let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (cport, wport, dead) = (free(), free(), free());
    let (coord, worker) = (format!("127.0.0.1:{cport}"), format!("127.0.0.1:{wport}"));
    let spawn = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_sokoshard"))
            .args(args)
            .env("SOKOSHARD_TOKEN", "health-test")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn sokoshard")
    };
    let cdir = dir.path().join("c");
    let wdir = dir.path().join("w");
    let _nodes = Nodes(vec![
        spawn(&["coordinator", "--listen", &coord, "--data-dir", cdir.to_str().unwrap()]),
        spawn(&[
            "worker",
            "--join",
            &coord,
            "--listen",
            &worker,
            "--data-dir",
            wdir.to_str().unwrap(),
            "--mem",
            "64M",
            "--threads",
            "1",
        ]),
    ]);
    let token = Some("health-test");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    for args in [vec![coord.as_str()], vec!["--worker", worker.as_str()]] {
        loop {
            let o = health(&args, token);
            if o.status.code() == Some(0) {
                assert!(String::from_utf8_lossy(&o.stdout).starts_with("ok: "));
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{args:?} never became healthy: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
    // the wrong kind of node, a wrong token, nothing listening
    assert_eq!(health(&["--worker", &coord], token).status.code(), Some(1));
    assert_eq!(health(&[&worker], token).status.code(), Some(1));
    let o = health(&[&coord], Some("wrong"));
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("token"), "{}", String::from_utf8_lossy(&o.stderr));
    let o = health(&[&format!("127.0.0.1:{dead}"), "--timeout", "2"], token);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).starts_with("unhealthy: "));
    // no token at all is a usage error
    assert_eq!(health(&[&coord], None).status.code(), Some(2));
}

/// The TLS override repeats each base command (compose replaces lists), so it
/// must be the base command plus TLS flags only, for every service, and the
/// health checks must trust the certificate the nodes serve, by the same name.
#[test]
fn the_compose_tls_override_is_the_base_plus_tls_flags() {
    let base = documents(&repo("deploy/docker-compose.yml")).remove(0);
    let tls = documents(&repo("deploy/docker-compose.tls.yml")).remove(0);
    let base_services = base["services"].as_object().unwrap();
    let services = tls["services"].as_object().expect("services");
    assert_eq!(
        services.keys().collect::<BTreeSet<_>>(),
        base_services.keys().collect::<BTreeSet<_>>(),
        "the override must cover every service"
    );
    let is_tls = |a: &String| a.starts_with("--tls-");
    for (name, svc) in services {
        let b = &base_services[name];
        let cmd = strings(&svc["command"], "command");
        let base_cmd = strings(&b["command"], "command");
        assert_eq!(cmd[..base_cmd.len()], base_cmd[..], "{name}: the override's command drifted from the base one");
        let extra = &cmd[base_cmd.len()..];
        assert!(extra.iter().all(is_tls), "{name}: the override adds more than TLS flags: {extra:?}");
        let cert = flag(&cmd, "--tls-cert").unwrap_or_else(|| panic!("{name}: --tls-cert"));
        assert!(flag(&cmd, "--tls-key").is_some(), "{name}: --tls-key");
        let domain = flag(&cmd, "--tls-domain").unwrap_or_else(|| panic!("{name}: --tls-domain"));

        let test = strings(&svc["healthcheck"]["test"], "healthcheck");
        let plain: Vec<String> = test.iter().filter(|a| !is_tls(a)).cloned().collect();
        assert_eq!(
            plain,
            strings(&b["healthcheck"]["test"], "healthcheck"),
            "{name}: the health check drifted from the base one"
        );
        assert_eq!(
            flag(&test, "--tls-ca"),
            Some(cert.clone()),
            "{name}: the health check must trust the served certificate"
        );
        assert_eq!(flag(&test, "--tls-domain"), Some(domain.clone()), "{name}: the health check checks another name");

        let vols = strings(&svc["volumes"], "volumes");
        let dir = cert.rsplit_once('/').unwrap().0;
        assert!(
            vols.iter().any(|v| compose_defaults(v).split(':').nth(1) == Some(dir)),
            "{name}: nothing mounted at {dir}, where the certificate is read"
        );
    }
}
