package schema

// The database roles the migrations create, one per service, and the ones
// the services assume (SET ROLE) by default after connecting.
const (
	// IngressRole inserts events and their jobs (inlet ingress).
	IngressRole = "webhook_ingress_writer"
	// StreamerRole claims, leases and reaps jobs (inlet streamer).
	StreamerRole = "webhook_streamer"
	// WorkerRole runs the ready consumers' attempts (inlet consumer).
	WorkerRole = "webhook_worker"
	// OperatorRole is the operator tools' and the admin API's.
	OperatorRole = "webhook_operator"
	// SealerRole writes the audit checkpoints.
	SealerRole = "webhook_sealer"
)
