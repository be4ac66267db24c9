cases_zookeeper() { :; }
