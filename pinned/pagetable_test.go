package pinned

// nodes counts the table's nodes (inner and leaf, root included); for tests.
func (t *pageTable) nodes() int {
	var walk func(n *ptInner, sh uint) int
	walk = func(n *ptInner, sh uint) int {
		c := 1
		for i := range n.slots {
			s := &n.slots[i]
			if sh == ptBits {
				if s.leaf.Load() != nil {
					c++
				}
			} else if ch := s.child.Load(); ch != nil {
				c += walk(ch, sh-ptBits)
			}
		}
		return c
	}
	return walk(&t.root, topShift)
}
