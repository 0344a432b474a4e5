// Subscription filters (CEL). A module of its own so that a consumer program
// that filters can check its filters (consumers.Config.CheckFilter =
// filter.Check) without requiring the Inlet server's module, and one that
// does not filter carries no CEL compiler.
module github.com/inlet-dev/inlet/filter

go 1.26.8

require cel.dev/cel-go v0.33.3

require (
	cel.dev/expr v0.25.2 // indirect
	github.com/antlr4-go/antlr/v4 v4.13.1 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/exp v0.0.0-20260718201538-764159d718ef // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260928230214-8a89bd6388cc // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260928230214-8a89bd6388cc // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
