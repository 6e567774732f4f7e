# shellcheck shell=bash
# Ray cluster token handling shared by ray_head.sh, ray_worker.sh and submit.sh: sourced, never run directly.
# The token is Ray's token-authentication secret (RAY_AUTH_MODE=token): it lives in one file readable by its
# owner only, is passed to Ray as RAY_AUTH_TOKEN_PATH, and is never printed, logged or forwarded to a job.

# ray_token_default_path: RAY_AUTH_TOKEN_PATH, else Ray's own default ~/.ray/auth_token.
ray_token_default_path() {
    echo "${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}"
}

# ray_token_check FILE: FILE must exist, be non-empty, belong to this user and be readable by it alone.
ray_token_check() {
    local file="$1" mode owner
    [[ -f "$file" ]] || { echo "error: Ray token file $file does not exist: copy it from the head node (mode 600), or pass --token-file FILE" >&2; exit 2; }
    [[ -s "$file" ]] || { echo "error: Ray token file $file is empty" >&2; exit 2; }
    owner="$(stat -c %u "$file")"
    [[ "$owner" == "$(id -u)" ]] || { echo "error: Ray token file $file belongs to uid $owner, not to you (uid $(id -u))" >&2; exit 2; }
    mode="$(stat -c %a "$file")"
    [[ "$mode" == 600 || "$mode" == 400 ]] \
        || { echo "error: Ray token file $file has mode $mode: others can read it; allowed 600 or 400 (chmod 600 $file)" >&2; exit 2; }
}

# ray_token_create_or_check FILE: create FILE with a fresh random token (mode 600) if missing, then check it.
ray_token_create_or_check() {
    local file="$1"
    if [[ ! -e "$file" ]]; then
        mkdir -p "$(dirname "$file")"
        chmod 700 "$(dirname "$file")" 2>/dev/null || true
        (umask 077 && "${PYTHON:-python3}" -c 'import secrets; print(secrets.token_hex(32), end="")' > "$file")
        echo "created Ray token file $file (mode 600)" >&2
    fi
    ray_token_check "$file"
}

# ray_token_fingerprint FILE: a short, non-secret identifier of the token (the first 8 hex digits of its SHA-256).
ray_token_fingerprint() {
    if [[ -r "$1" ]]; then
        echo "fingerprint sha256:$(sha256sum < "$1" | cut -c1-8)"
    else
        echo "created on start"
    fi
}
