#!/bin/bash
# The Kubernetes manifests of configs/k8s against the real schemas, as
# kubectl apply would check them, but offline: kubectl needs an API server
# for discovery even with --dry-run=client, so the built-in kinds (Job,
# Service, and every pod template, also the PyTorchJob's) are validated
# strictly against Kubernetes' OpenAPI schemas from PyPI's
# kubernetes-validate, and the PyTorchJob's own fields against the
# training-operator CRD's schema (kubeflow.org/v1), written out below.
# Then what crun needs of them: names, ports, the node count, the grace
# period against crun's --shutdown-timeout default. A broken copy must be
# refused, so the check can fail.
set -u
: "${CRUN:?CRUN must name crun}"
: "${CRUN_SOURCE_DIR:?}"
: "${CRUN_BUILD_DIR:?}"

fail() {
	echo "FAIL: $*"
	exit 1
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM

# kubernetes-validate in a virtual environment made once and shared by the
# build trees (the user's cache; the build tree's where it cannot be
# written), under a lock so that two runs do not make it at once.
cache=${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/crun-test
mkdir -p "$cache" 2>/dev/null && [ -w "$cache" ] || cache=$CRUN_BUILD_DIR
venv=$cache/k8s-validate-venv
py=$venv/bin/python
exec 9>"$cache/k8s-validate-venv.lock"
flock -w 600 9 || fail "could not lock $cache/k8s-validate-venv.lock"
if ! "$py" -c 'import kubernetes_validate, yaml, jsonschema' 2>/dev/null; then
	rm -rf "$venv"
	python3 -m venv "$venv" >"$tmp/venv.log" 2>&1 ||
		fail "python3 -m venv: $(tail -n 3 "$tmp/venv.log") (Debian: python3-venv)"
	if ! timeout --foreground 300 "$venv/bin/pip" install -q --disable-pip-version-check \
		kubernetes-validate==1.37.0 >"$tmp/pip.log" 2>&1; then
		if ! timeout --foreground 20 python3 -c 'import urllib.request
urllib.request.urlopen("https://pypi.org/simple/kubernetes-validate/", timeout=15)' 2>/dev/null; then
			rm -rf "$venv"
			echo "PyPI is unreachable (kubernetes-validate): skipping"
			exit 77
		fi
		fail "pip install kubernetes-validate: $(tail -n 5 "$tmp/pip.log")"
	fi
fi
exec 9>&-

# crun's default --shutdown-timeout, in seconds, from --help.
shutdown=$("$CRUN" --help | grep -A3 -- '--shutdown-timeout' | grep -oE 'default: [0-9]+s' |
	grep -oE '[0-9]+' | head -n 1)
[ -n "$shutdown" ] || fail "no --shutdown-timeout default in crun --help"

cat >"$tmp/check.py" <<'EOF'
import sys

import jsonschema
import kubernetes_validate as kv
import yaml

K8S = "1.32.0"
SHUTDOWN = int(sys.argv[1])

# kubeflow.org/v1 PyTorchJob: the CRD's openAPIV3Schema for the job's own
# fields (manifests/base/crds/kubeflow.org_pytorchjobs.yaml of
# kubeflow/training-operator); the pod templates are checked against
# Kubernetes' own PodTemplateSpec below.
INT = {"type": "integer"}
STR = {"type": "string"}
REPLICA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "replicas": INT,
        "restartPolicy": {"type": "string",
                          "enum": ["Always", "OnFailure", "Never", "ExitCode"]},
        "template": {"type": "object"},
    },
}
PYTORCHJOB = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "kubeflow.org/v1"},
        "kind": {"const": "PyTorchJob"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "required": ["pytorchReplicaSpecs"],
            "additionalProperties": False,
            "properties": {
                "nprocPerNode": STR,
                "runPolicy": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "activeDeadlineSeconds": INT,
                        "backoffLimit": INT,
                        "cleanPodPolicy": {"enum": ["All", "Running", "None"]},
                        "schedulingPolicy": {"type": "object"},
                        "suspend": {"type": "boolean"},
                        "managedBy": STR,
                        "ttlSecondsAfterFinished": INT,
                    },
                },
                "elasticPolicy": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "minReplicas": INT, "maxReplicas": INT, "maxRestarts": INT,
                        "nProcPerNode": INT, "rdzvBackend": {"enum": ["c10d", "etcd", "etcd-v2"]},
                        "rdzvHost": STR, "rdzvPort": INT, "rdzvId": STR,
                        "rdzvConf": {"type": "array"}, "standalone": {"type": "boolean"},
                        "metrics": {"type": "array"},
                    },
                },
                "pytorchReplicaSpecs": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"Master": REPLICA, "Worker": REPLICA},
                },
            },
        },
    },
}


def pod_template(tmpl, where):
    """A pod template as Kubernetes' strict PodTemplate schema takes it."""
    kv.validate({"apiVersion": "v1", "kind": "PodTemplate",
                 "metadata": {"name": "t"}, "template": tmpl}, K8S, strict=True)


def env_of(c):
    return {e["name"]: e.get("value") for e in c.get("env", [])}


def probe_port(c, where):
    cmd = " ".join(c["readinessProbe"]["exec"]["command"])
    assert "crunctl" in cmd and " ping" in cmd, f"{where}: the readiness probe is not crunctl ping"
    return int(cmd.split("--endpoint=127.0.0.1:")[1].split()[0])


def grace(spec, where):
    g = spec["terminationGracePeriodSeconds"]
    assert g >= SHUTDOWN + 10, \
        f"{where}: terminationGracePeriodSeconds {g} < --shutdown-timeout {SHUTDOWN} s + 10 s"


def check_pytorchjob(d):
    jsonschema.validate(d, PYTORCHJOB)
    for rtype, r in d["spec"]["pytorchReplicaSpecs"].items():
        where = f"PyTorchJob {rtype}"
        pod_template(r["template"], where)
        spec = r["template"]["spec"]
        grace(spec, where)
        c = [c for c in spec["containers"] if c["name"] == "pytorch"]
        assert c, f"{where}: no container named pytorch (the operator's)"
        ports = {p.get("name"): p["containerPort"] for p in c[0].get("ports", [])}
        assert "pytorchjob-port" in ports, f"{where}: no port named pytorchjob-port"
        if rtype == "Master":
            assert probe_port(c[0], where) == ports["pytorchjob-port"], \
                f"{where}: the probe pings another port than MASTER_PORT"
            assert r["replicas"] == 1, f"{where}: one master"


def check_indexed(docs):
    svc = [d for d in docs if d["kind"] == "Service"][0]
    job = [d for d in docs if d["kind"] == "Job"][0]
    name, sub = job["metadata"]["name"], job["spec"]["template"]["spec"]["subdomain"]
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed", "not an Indexed Job"
    assert svc["metadata"]["name"] == sub, "the Service is not the pods' subdomain"
    assert svc["spec"]["clusterIP"] == "None", "the Service is not headless"
    assert svc["spec"]["selector"] == {"job-name": name}, "the Service selects other pods"
    pod = spec["template"]["spec"]
    grace(pod, "Job")
    c = pod["containers"][0]
    env = env_of(c)
    assert env["PET_NNODES"] == str(spec["completions"]) == str(spec["parallelism"]), \
        "PET_NNODES, completions and parallelism differ"
    assert env["PET_MASTER_ADDR"] == f"{name}-0.{sub}", \
        f"PET_MASTER_ADDR is not pod 0's name {name}-0.{sub}"
    port = int(env["PET_MASTER_PORT"])
    assert probe_port(c, "Job") == port, "the probe pings another port than PET_MASTER_PORT"
    assert port in [p["containerPort"] for p in c["ports"]], "PET_MASTER_PORT is not a port"


def check_file(path):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    for d in docs:
        if d["kind"] == "PyTorchJob":
            check_pytorchjob(d)
        else:
            kv.validate(d, K8S, strict=True)
    if any(d["kind"] == "Job" for d in docs):
        check_indexed(docs)
    return [d["kind"] for d in docs]


status = 0
for path in sys.argv[2:]:
    try:
        print(f"{path}: {', '.join(check_file(path))}: valid")
    except (kv.ValidationError, jsonschema.ValidationError) as e:
        print(f"{path}: invalid: {e.message} at {'.'.join(map(str, e.path))}")
        status = 1
    except (AssertionError, KeyError, IndexError) as e:
        print(f"{path}: {e!r}")
        status = 1
sys.exit(status)
EOF

dir=$CRUN_SOURCE_DIR/configs/k8s
for f in pytorchjob.yaml indexed-job.yaml; do
	[ -f "$dir/$f" ] || fail "configs/k8s/$f is missing"
done
"$py" "$tmp/check.py" "$shutdown" "$dir"/*.yaml >"$tmp/out" 2>&1 ||
	fail "$(cat "$tmp/out")"
cat "$tmp/out"

# Broken copies are refused, each for its own reason.
sed 's/^      restartPolicy: Never/      restartPolicy: Sometimes/' "$dir/pytorchjob.yaml" \
	>"$tmp/bad-restart.yaml"
sed 's/^  nprocPerNode:/  nProcsPerNode:/' "$dir/pytorchjob.yaml" >"$tmp/bad-field.yaml"
sed 's/containerPort: 23456/containerPort: "23456"/' \
	"$dir/pytorchjob.yaml" >"$tmp/bad-pod.yaml"
sed 's/^          image: IMAGE/          imag: IMAGE/' "$dir/indexed-job.yaml" >"$tmp/bad-job.yaml"
sed 's/^  completions: 2/  completions: 3/' "$dir/indexed-job.yaml" >"$tmp/bad-count.yaml"
sed 's/terminationGracePeriodSeconds: 45/terminationGracePeriodSeconds: 30/' \
	"$dir/indexed-job.yaml" >"$tmp/bad-grace.yaml"
for b in restart field pod job count grace; do
	cmp -s "$tmp/bad-$b.yaml" "$dir/pytorchjob.yaml" && fail "bad-$b: the edit did not apply"
	cmp -s "$tmp/bad-$b.yaml" "$dir/indexed-job.yaml" && fail "bad-$b: the edit did not apply"
	if "$py" "$tmp/check.py" "$shutdown" "$tmp/bad-$b.yaml" >"$tmp/bad.out" 2>&1; then
		fail "bad-$b.yaml passed: $(cat "$tmp/bad.out")"
	fi
	echo "bad-$b: $(tail -n 1 "$tmp/bad.out")"
done
echo "ok"
