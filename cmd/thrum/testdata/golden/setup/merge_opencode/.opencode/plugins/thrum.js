// thrum wakes this agent's idle opencode session when mail comes: it puts
// one line of thrum's own before the session as its next prompt,
//   thrum: 2 new messages (newest msg_… from bob); call check_messages
// and claims nothing (check_messages brings the messages). Written by
// thrum setup opencode, which rewrites it; --no-wake leaves it out.
import { spawn } from "node:child_process"
import { createInterface } from "node:readline"

const bell = ["thrum","wait","--follow","--wake"]

export const ThrumWake = async ({ client }) => {
  let session // the agent's session: the last top-level one created or updated
  const p = spawn(bell[0], bell.slice(1), { stdio: ["ignore", "pipe", "ignore"] })
  p.on("error", () => {})
  createInterface({ input: p.stdout }).on("line", (text) => {
    const id = session
    if (!id) return
    client.session
      .promptAsync({ path: { id }, body: { parts: [{ type: "text", text }] } })
      .then((r) => r.error && session === id && (session = undefined), () => session === id && (session = undefined))
  })
  return {
    event: async ({ event }) => {
      const info = event.properties?.info
      if (!info || info.parentID) return
      if (event.type === "session.created" || event.type === "session.updated") session = info.id
      if (event.type === "session.deleted" && info.id === session) session = undefined
    },
  }
}
