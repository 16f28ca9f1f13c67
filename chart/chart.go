// Package chart writes gonum plots to PNG or SVG files, the one place the
// simulator's and the reports' charts are rendered to disk.
package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// NewCanvas returns an SVG or PNG canvas of w x h, chosen by file's
// extension (.svg or .png).
func NewCanvas(file string, w, h vg.Length) (vg.CanvasWriterTo, error) {
	switch strings.ToLower(filepath.Ext(file)) {
	case ".svg":
		return vgsvg.New(w, h), nil
	case ".png":
		return vgimg.PngCanvas{Canvas: vgimg.New(w, h)}, nil
	}
	return nil, fmt.Errorf("plot %q: want a .svg or .png file", file)
}

// WriteFile writes the drawn canvas c to file.
func WriteFile(c vg.CanvasWriterTo, file string) error {
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plot %s: %w", file, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("plot %s: %w", file, err)
	}
	return nil
}
