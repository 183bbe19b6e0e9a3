package jsonrpc

// Checks for HTTP endpoints on a loopback port, shared with thrum's other
// servers (the MCP server's Streamable HTTP transport) so that every
// loopback endpoint refuses the same requests as the WebSocket does.

// LoopbackHost reports whether a Host header names this machine's
// loopback interface (localhost, 127.0.0.0/8 or ::1, with an optional
// port): anything else may be a DNS-rebinding page.
func LoopbackHost(hostport string) bool { return loopbackHost(hostport) }

// LoopbackOrigin reports whether a browser Origin is a loopback http(s)
// page, as the WebSocket accepts with no ServerOptions.AllowedOrigins.
func LoopbackOrigin(origin string) bool { return (&Server{}).allowedOrigin(origin) }
