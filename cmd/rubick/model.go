package main

import (
	"context"
	"fmt"
	"io"
)

// runModel implements `rubick model fit|validate|best-plan`.
func runModel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return fmt.Errorf("model: not built yet")
}
