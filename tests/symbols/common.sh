# Shared by the symbol tests and build/symbols.sh (sourced, not run).
# The public API: what build/libgoiwarp.map exports.
# The rsocket calls of <rdma/rsocket.h> (rsockets/), by name.
GIW_RSOCKET_RE='^(rsocket|rbind|rlisten|raccept|rconnect|rshutdown|rclose|rrecv|rrecvfrom|rrecvmsg|rsend|rsendto|rsendmsg|rread|rreadv|rwrite|rwritev|rpoll|rselect|rgetpeername|rgetsockname|rsetsockopt|rgetsockopt|rfcntl|riomap|riounmap|riowrite)$'
GIW_API_RE="^(ibv_|rdma_|giw_|_ibv_|__ibv_)|_to_ibv_rate\$|$GIW_RSOCKET_RE"
# libc's signal-installing calls, defined by the shim alone (capi/loader/signals.c).
GIW_SIGNAL_RE='^(sigaction|signal|bsd_signal|sysv_signal|__sysv_signal|sigset)$'
# What an rdma-core binary may import from us (giw_* is ours only). rsockets'
# r* calls (rsocket, rsend, ...) are counted apart (docs/symbols.md, rsockets).
GIW_IMPORT_RE='^(ibv_|rdma_|_ibv_|__ibv_)|_to_ibv_rate$'

# giw_defined LIB: sorted public names LIB defines (version suffix stripped).
giw_defined() {
  nm -D --defined-only "$1" | awk 'NF >= 3 { print $3 }' | sed 's/@.*//' | sort -u
}

# giw_imports BIN: sorted ibv_/rdma_/_ibv_ names BIN imports (version stripped).
giw_imports() {
  nm -D --undefined-only "$1" 2>/dev/null | awk '{ print $NF }' | sed 's/@.*//' |
    grep -E "$GIW_IMPORT_RE" | sort -u || true
}

# giw_soname LIB: LIB's DT_SONAME (empty if none).
giw_soname() {
  readelf -d "$1" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p'
}
