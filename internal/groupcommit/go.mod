// The group commit shared by ingress and the consumer SDK. A module of its
// own so that the SDK (module github.com/inlet-dev/inlet/consumers) uses it
// without requiring the Inlet server's module and its dependencies.
module github.com/inlet-dev/inlet/internal/groupcommit

go 1.26.8
