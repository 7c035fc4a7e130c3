module github.com/agentstore/agentstore/interop

go 1.26.8

require github.com/agentstore/agentstore v0.0.0

require (
	github.com/golang-migrate/migrate/v4 v4.20.1 // indirect
	github.com/mfridman/interpolate v0.0.2 // indirect
	github.com/pressly/goose/v3 v3.30.0 // indirect
	github.com/sethvargo/go-retry v0.5.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
)

replace github.com/agentstore/agentstore => ../
