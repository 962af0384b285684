"""DAPO: Decoupled Clip and Dynamic sAmpling Policy Optimization, on one process or on Ray."""
