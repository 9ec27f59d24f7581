//go:build !linux

package hugetest

import "errors"

func probe() error { return errors.New("hugetlb pages are Linux's") }
