// # Writing a backend
//
// Application code needs none of what follows; it is the plumbing a
// backend package uses, and lives here because it is written once, over
// package backend's driver interface, for every backend:
//
//   - [Register] and [RegisterDiagnoser], called from a backend package's
//     init, make its URL schemes available to [Open] and [Diagnose].
//   - [New] turns a backend.Driver into a Locker; a backend's typed
//     constructor calls [CheckConfig] first, so that a bad configuration
//     fails there rather than at every Acquire, and logs through
//     [Config.ResolvedLogger].
//   - [RTTFinding], [SizeFinding] and [TTLFinding] judge what a backend's
//     Diagnoser measured, with the thresholds every backend shares.
//
// Package conformance checks a new backend against every rule above.
package locker
