// Command dispatcher is Molecule Relay's dispatcher stage as one binary for every shape:
// an AWS Lambda function (provided.al2023 "bootstrap", when
// AWS_LAMBDA_RUNTIME_API is set), a long-running worker, or a one-shot run
// with --once. Configuration is the CLI's: the same environment variables.
package main

import (
	"os"

	"github.com/molecule-ai/molecule-relay/internal/lambdafn"
)

func main() { os.Exit(lambdafn.Main(lambdafn.Dispatcher)) }
